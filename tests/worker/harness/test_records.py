"""headroom_harness.records: the lines the worker reads (gpu_executors.cc
parses "hello", "batch_start", "result" and "error" lines by these keys)."""

import json

from headroom_harness import records

RESULT_KEYS = ["event", "batch", "oom", "peak_allocated_bytes", "peak_reserved_bytes",
               "step_seconds", "steps", "energy_j", "error", "optimizer",
               "device_context_bytes", "phases", "unmeasured_phases", "framework", "load",
               "emulated"]
GROUP_KEYS = RESULT_KEYS[:10] + ["world_size", "rank_peaks_gb", "peak_allocated_gb",
                                 "host_peak_gb", "peak_source"] + RESULT_KEYS[10:]


def timed(seconds, start_mj=None, end_mj=None):
    record = records.Measurement()
    record.seconds = list(seconds)
    record.steps = len(seconds)
    record.energy_start_mj, record.energy_end_mj = start_mj, end_mj
    return record


def test_measurement_energy_is_the_counter_difference_in_joules():
    assert records.Measurement().energy_j() is None
    assert timed([0.1], start_mj=1000).energy_j() is None
    assert timed([0.1], start_mj=1_000, end_mj=42_500).energy_j() == 41.5


def test_mean_step_seconds_only_when_the_batch_succeeded():
    record = timed([0.25, 0.5, 0.75])
    assert records.mean_step_seconds(record, True) == 0.5
    assert records.mean_step_seconds(record, False) is None
    assert records.mean_step_seconds(timed([]), True) is None


def test_a_batch_result_line():
    line = records.batch_result(4, False, "", 2_000_000_000, 2_147_483_648,
                                timed([0.5, 1.5], 0, 30_000), "torch.optim.AdamW(foreach=True)")
    assert list(line) == RESULT_KEYS
    assert line == {"event": "result", "batch": 4, "oom": False,
                    "peak_allocated_bytes": 2_000_000_000, "peak_reserved_bytes": 2_147_483_648,
                    "step_seconds": 1.0, "steps": 2, "energy_j": 30.0, "error": "",
                    "optimizer": "torch.optim.AdamW(foreach=True)",
                    "device_context_bytes": None, "phases": [], "unmeasured_phases": [],
                    "framework": None, "load": None, "emulated": []}


def test_a_result_says_which_profile_ran_and_what_was_emulated():
    record = timed([0.5])
    record.framework, record.load = "torchtune", "init on the device, state dict loaded"
    record.emulated = ["torchao.NF4Tensor"]
    line = records.batch_result(1, False, "", None, None, record, None)
    assert (line["framework"], line["emulated"]) == ("torchtune", ["torchao.NF4Tensor"])
    # Under torch.distributed, rank 0's fields and how the model was wrapped.
    ranks = [dict(rank(i, 5, 0.5, None, 1), framework="litgpt", load="meta init",
                  emulated=["bitsandbytes.Linear4bit"], fsdp="fsdp2") for i in range(2)]
    line = records.group_result(2, ranks)
    assert (line["framework"], line["emulated"], line["wrapped"]) == (
        "litgpt", ["bitsandbytes.Linear4bit"], "fsdp2")


def test_a_failed_batch_keeps_its_peak_and_steps_but_no_timing():
    oom = records.batch_result(8, True, "", 9_000, 9_500, timed([0.5], 0, 1_000), None)
    assert (oom["oom"], oom["peak_allocated_bytes"], oom["steps"]) == (True, 9_000, 1)
    assert (oom["step_seconds"], oom["energy_j"]) == (None, None)
    error = records.batch_result(8, False, "SpecError: no", None, None, timed([]), None)
    assert (error["error"], error["step_seconds"], error["steps"]) == ("SpecError: no", None, 0)


def rank(i, peak, seconds, energy, rss):
    return {"rank": i, "batch": 2, "world_size": 2, "oom": False, "error": "",
            "optimizer": "torch.optim.AdamW(foreach=True)", "peak_bytes": peak,
            "reserved_bytes": None, "rss_bytes": rss, "steps": 3, "step_seconds": seconds,
            "energy_j": energy, "peak_source": "torch.cuda.max_memory_allocated"}


def test_a_group_result_is_every_rank_in_order():
    line = records.group_result(2, [rank(0, 3_000_000_000, 0.5, 10.0, 2_000_000_000),
                                    rank(1, 4_000_000_000, 0.75, 12.5, 3_000_000_000)])
    assert list(line) == GROUP_KEYS
    assert line["rank_peaks_gb"] == [3.0, 4.0]
    assert (line["peak_allocated_bytes"], line["peak_allocated_gb"]) == (4_000_000_000, 4.0)
    assert line["step_seconds"] == 0.75  # the slowest rank
    assert line["energy_j"] == 22.5  # the ranks' sum
    assert line["host_peak_gb"] == 5.0  # resident sets summed
    assert (line["world_size"], line["steps"], line["error"]) == (2, 3, "")
    assert line["peak_reserved_bytes"] is None


def test_a_group_result_without_peaks_or_energy():
    line = records.group_result(1, [rank(0, None, 0.5, None, 1_000_000_000),
                                    rank(1, 5, None, 1.0, 1_000_000_000)])
    assert (line["rank_peaks_gb"], line["peak_allocated_gb"]) == (None, None)
    assert (line["step_seconds"], line["energy_j"]) == (None, None)


def test_a_group_failure_names_the_rank():
    failed = dict(rank(1, 7_000, None, None, 0), oom=True, steps=1)
    line = records.group_result(2, [], failed=failed)
    assert (line["oom"], line["failed_rank"], line["peak_allocated_bytes"]) == (True, 1, 7_000)
    assert (line["rank_peaks_gb"], line["host_peak_gb"], line["step_seconds"]) == (None,) * 3


def test_an_unsupported_setup_is_a_failure_record_for_the_batch():
    line = records.unsupported_result(1, "setup.nodes = 2: the harness runs one node", None, 4)
    assert line == {"event": "result", "batch": 1, "oom": False,
                    "peak_allocated_bytes": None, "peak_reserved_bytes": None,
                    "step_seconds": None, "steps": 0, "energy_j": None,
                    "error": "setup.nodes = 2: the harness runs one node", "optimizer": None,
                    "world_size": 4, "rank_peaks_gb": None, "host_peak_gb": None}


def test_emit_prints_one_line_on_rank_0_only(capsys, monkeypatch):
    records.emit({"event": "batch_start", "batch": 1})
    monkeypatch.setattr(records, "EMITS", [False])  # another rank
    records.emit({"event": "batch_start", "batch": 2})
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    assert json.loads(out) == {"event": "batch_start", "batch": 1}
