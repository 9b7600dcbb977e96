"""headroom_harness.memory: the phases of a batch's run with a fake
allocator and NVML (no GPU needed), the allocator's options for
expandable_segments, and a CPU run that walks the phases a setup asks for."""

import json

import pytest

from headroom_harness import memory, records
from headroom_harness.memory import PhaseMeter
from headroom_harness.setups import Setup

GB = 1_000_000_000


class FakeStats:
    """An allocator whose peak stats and NVML's used bytes the test sets;
    it counts resets and synchronizes as CUDA would see them."""

    def __init__(self, used):
        self.allocated = self.reserved = 0
        self.used = used
        self.resets = 0
        self.syncs = 0

    def hold(self, allocated, reserved, used=None):
        """The allocator reaches these peaks (stats keep the largest)."""
        self.allocated = max(self.allocated, allocated)
        self.reserved = max(self.reserved, reserved)
        if used is not None:
            self.used = used

    def synchronize(self):
        self.syncs += 1

    def peaks(self):
        return self.allocated, self.reserved

    def reset(self):
        self.resets += 1
        self.allocated = self.reserved = 0

    def device_used_bytes(self):
        return self.used


def test_each_phase_has_its_own_peaks_and_the_batch_keeps_the_largest():
    stats = FakeStats(used=1 * GB)  # the baseline: other processes, the driver
    meter = PhaseMeter(stats, baseline_bytes=1 * GB)
    meter.start("load")
    stats.hold(4 * GB, 5 * GB, used=6 * GB + 500_000_000)
    meter.end()
    meter.start("first-step")
    stats.hold(9 * GB, 11 * GB, used=12 * GB)
    meter.end()
    # A later warm-up step between phases: in the batch's peaks only.
    stats.hold(10 * GB, 12 * GB)
    meter.start("step")
    stats.hold(8 * GB, 11 * GB, used=12 * GB + 250_000_000)
    meter.end()
    assert meter.phases == [
        {"phase": "load", "peak_allocated_bytes": 4 * GB, "peak_reserved_bytes": 5 * GB,
         "device_bytes": 5_500_000_000},
        {"phase": "first-step", "peak_allocated_bytes": 9 * GB,
         "peak_reserved_bytes": 11 * GB, "device_bytes": 11 * GB},
        {"phase": "step", "peak_allocated_bytes": 8 * GB, "peak_reserved_bytes": 11 * GB,
         "device_bytes": 11_250_000_000}]
    assert meter.peaks() == (10 * GB, 12 * GB)
    assert stats.resets == 3


def test_an_oom_inside_a_phase_is_in_the_batch_peaks_but_not_a_phase():
    stats = FakeStats(used=0)
    meter = PhaseMeter(stats)
    meter.start("load")
    stats.hold(2 * GB, 2 * GB)
    meter.end()
    meter.start("first-step")
    stats.hold(70 * GB, 80 * GB)  # then the OOM: end() is never called
    assert [p["phase"] for p in meter.phases] == ["load"]
    assert meter.peaks() == (70 * GB, 80 * GB)
    # Without a baseline the device figure is not reported.
    assert meter.phases[0]["device_bytes"] is None


def test_a_device_below_its_baseline_is_zero_and_an_unknown_phase_is_refused():
    stats = FakeStats(used=3 * GB)
    meter = PhaseMeter(stats, baseline_bytes=4 * GB)
    assert meter.device_bytes() == 0
    stats.used = None  # NVML stopped answering
    assert meter.device_bytes() is None
    with pytest.raises(ValueError) as error:
        meter.start("generate")
    assert str(error.value) == ("phase generate is not one of load, first-step, step, "
                                "eval, save")


def test_setup_phases_default_to_load_and_step():
    assert memory.setup_phases(Setup()) == {"load", "step"}
    assert memory.setup_phases(Setup(phases=["LOAD", "STEP", "EVAL", "SAVE"])) == {
        "load", "step", "eval", "save"}


@pytest.mark.parametrize("current,expandable,want", [
    (None, True, "expandable_segments:True"),
    ("max_split_size_mb:128", True, "max_split_size_mb:128,expandable_segments:True"),
    ("expandable_segments:True,max_split_size_mb:64", False, "max_split_size_mb:64"),
    ("expandable_segments:False", True, "expandable_segments:True"),
    (None, False, ""),
])
def test_the_allocator_options_say_what_the_setup_says(current, expandable, want):
    assert memory.alloc_conf(current, expandable) == want


def test_apply_alloc_conf_sets_or_removes_the_variable():
    environ = {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    memory.apply_alloc_conf(False, environ)
    assert environ == {}
    memory.apply_alloc_conf(True, environ)
    assert environ == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}


def rank(phases, context=None):
    return {"rank": 0, "batch": 2, "world_size": 2, "oom": False, "error": "",
            "optimizer": "x", "peak_bytes": 5, "reserved_bytes": 6, "rss_bytes": 1,
            "steps": 1, "step_seconds": 0.5, "energy_j": None, "peak_source": "cuda",
            "phases": phases, "device_context_bytes": context, "unmeasured_phases": []}


def row(name, allocated, reserved, device):
    return {"phase": name, "peak_allocated_bytes": allocated,
            "peak_reserved_bytes": reserved, "device_bytes": device}


def test_a_group_reports_each_phase_of_its_fullest_gpu():
    line = records.group_result(2, [rank([row("load", 4, 5, None), row("step", 9, 10, None)]),
                                    rank([row("load", 3, 6, None), row("step", 11, 12, None)])])
    assert line["phases"] == [row("load", 4, 6, None), row("step", 11, 12, None)]
    assert line["device_context_bytes"] is None
    assert records.group_result(2, [rank(None), rank([])])["phases"] == []


torch = pytest.importorskip("torch", reason="the CPU run needs torch")

from headroom_harness.model_spec import parse_spec  # noqa: E402
from headroom_harness.phases import measure_batch, unmeasured_phases  # noqa: E402
from test_wiring import LM  # noqa: E402


class RecordingMeter:
    """A meter that records the order of phases (a CPU run has no peaks)."""

    def __init__(self):
        self.calls = []
        self.phases = []

    def start(self, phase):
        self.calls.append(("start", phase))

    def end(self):
        self.calls.append(("end",))


@pytest.mark.usefixtures("generated_protos")
@pytest.mark.parametrize("warmup,steps,setup,want", [
    (1, 2, Setup(), ["load", "first-step", "step"]),
    (0, 1, Setup(), ["load", "first-step"]),
    (2, 2, Setup(phases=["LOAD", "STEP", "EVAL", "SAVE"], eval_batch=3),
     ["load", "first-step", "step", "eval", "save"]),
    (1, 1, Setup(phases=["SAVE", "LOAD"]), ["load", "first-step", "step", "save"]),
])
def test_a_cpu_run_walks_the_phases_the_setup_asks_for(warmup, steps, setup, want):
    meter = RecordingMeter()
    record = records.Measurement()
    measure_batch(parse_spec(json.dumps(LM), "lm"), setup, torch.device("cpu"), 2, warmup,
                  steps, record, meter=meter)
    starts = [call[1] for call in meter.calls if call[0] == "start"]
    assert starts == want
    # Every phase is closed before the next opens.
    assert all(a[0] == "start" and b == ("end",)
               for a, b in zip(meter.calls[::2], meter.calls[1::2]))
    assert record.steps == steps


def test_generate_is_named_as_not_measured():
    assert unmeasured_phases(Setup(phases=["LOAD", "STEP", "GENERATE"])) == ["generate"]
    assert unmeasured_phases(Setup()) == []
