"""worker/harness/headroom_torch_probe.py: the entry point the worker runs,
and which of the package's modules import without torch."""

import json
import os
import subprocess
import sys

import pytest

from test_records import RESULT_KEYS

TORCH_FREE = ("errors", "records", "proto", "model_spec", "setups", "wiring", "flags",
              "memory")


def python(code, *argv, cwd=None):
    """Runs `code` in a fresh python3 where `import torch` fails."""
    blocked = "import sys; sys.modules['torch'] = None\n" + code
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([sys.executable, "-c", blocked, *argv], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=120, check=False)


def test_without_torch_the_entry_point_says_so_and_exits_2(harness_dir):
    entry = os.path.join(harness_dir, "headroom_torch_probe.py")
    done = python("import runpy; sys.argv = sys.argv[1:]; "
                  "runpy.run_path(sys.argv[0], run_name='__main__')",
                  entry, "count", "--spec", "m.json")
    assert done.returncode == 2, done.stderr
    line = json.loads(done.stdout)
    assert line["event"] == "error"
    assert line["error"].startswith("python3-torch is not installed: ")


def test_the_torch_free_modules_import_without_torch(harness_dir):
    imports = "; ".join(f"import headroom_harness.{name}" for name in TORCH_FREE)
    done = python(f"sys.path.insert(0, {harness_dir!r}); {imports}; "
                  "print(sorted(m for m in sys.modules if m.startswith('headroom_harness.')))")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(sorted(f"headroom_harness.{n}" for n in TORCH_FREE))


def run_entry(harness_dir, *argv):
    pytest.importorskip("torch", reason="the harness's commands need torch")
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run([sys.executable, os.path.join(harness_dir, "headroom_torch_probe.py"),
                           *argv], capture_output=True, text=True, env=env, timeout=300,
                          check=False)
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines()], done.stderr


def test_count_prints_the_five_counts(harness_dir, model_path, generated_protos):
    rc, lines, stderr = run_entry(harness_dir, "count", "--spec", model_path("simple-cnn"))
    assert rc == 0, stderr
    assert lines == [{"name": "simple-cnn", "params": 804554, "trainable_params": 804554,
                      "frozen_params": 0, "adapter_params": 0, "quantized_params": 0}]


def test_run_prints_hello_then_a_result_per_batch(harness_dir, model_path, generated_protos):
    rc, lines, stderr = run_entry(harness_dir, "run", "--spec", model_path("simple-cnn"),
                                  "--batches", "1,2", "--device", "cpu", "--warmup", "0",
                                  "--steps", "1")
    assert rc == 0, stderr
    assert [line["event"] for line in lines] == ["hello", "batch_start", "result",
                                                 "batch_start", "result"]
    assert (lines[0]["device"], lines[0]["params"]) == ("cpu", 804554)
    for batch, result in ((1, lines[2]), (2, lines[4])):
        assert list(result) == RESULT_KEYS
        assert (result["batch"], result["oom"], result["error"], result["steps"]) == (
            batch, False, "", 1)
        assert result["peak_allocated_bytes"] is None  # no allocator peak on the CPU
        assert result["step_seconds"] > 0


def test_bad_flags_are_one_error_line(harness_dir, model_path, generated_protos):
    rc, lines, _ = run_entry(harness_dir, "run", "--spec", model_path("simple-cnn"),
                             "--batches", "1", "--setup", '{"gpus": 2}')
    assert rc == 2 and len(lines) == 1 and lines[0]["event"] == "error"
    assert "--nproc_per_node 2" in lines[0]["error"]


def test_run_with_eval_and_save_phases_on_the_cpu(harness_dir, model_path, generated_protos):
    setup = json.dumps({"phases": ["LOAD", "STEP", "EVAL", "SAVE", "GENERATE"],
                        "evalBatch": 3, "expandableSegments": True})
    rc, lines, stderr = run_entry(harness_dir, "run", "--spec", model_path("simple-cnn"),
                                  "--batches", "2", "--device", "cpu", "--warmup", "1",
                                  "--steps", "1", "--setup", setup)
    assert rc == 0, stderr
    result = lines[-1]
    assert (result["event"], result["error"], result["steps"]) == ("result", "", 1)
    # No allocator or NVML on the CPU: no phase figures, and generate is
    # named as a phase the harness does not measure.
    assert (result["phases"], result["device_context_bytes"]) == ([], None)
    assert result["unmeasured_phases"] == ["generate"]
