#!/usr/bin/env python3
"""The torch harness under torch.distributed, on the CPU (gloo), no GPU.

Runs the harness as the worker's torch executor launches a multi-GPU probe
(python -m torch.distributed.run --nnodes 1 --nproc_per_node 2, static
rendezvous on 127.0.0.1 and a free port), with DDP for simple-cnn, and
checks rank 0's lines: two rank peaks (on the CPU, each rank's counted
model-state bytes: there is no allocator peak), peak = their max,
host_peak_gb > 0. Then an injected OOM on rank 1 while rank 0 waits in
backward's all-reduce must be the batch's OOM without a hang; FSDP and the
setups the harness does not run must give failure records; and FSDP's unit
grouping (each copy of a top-level repeated layer run through its own
module) must compute what the plain program computes.

  python3 worker/harness/test_distributed.py --proto_path build/python

Exit 0 when everything holds, 1 on any failure (named), 77 (skipped) when
python3 has no torch or torch.distributed with gloo.
"""

import argparse
import json
import os
import socket
import subprocess
import sys

EXIT_SKIPPED = 77
RUN_TIMEOUT_S = 240
HERE = os.path.dirname(os.path.abspath(__file__))
HARNESS = os.path.join(HERE, "headroom_torch_probe.py")
MODELS = os.path.join(HERE, "..", "..", "models")

# Debian's torch 1.13 under Python 3.11: torch.distributed.run's Std.from_str
# finds no member for "0" (IntFlag iteration skips zero), so the launcher
# crashes before starting a worker. This shim fixes that one lookup and runs
# the real launcher; a torch without the bug runs `-m torch.distributed.run`.
LAUNCHER_SHIM = """
import runpy, sys
from torch.distributed.elastic.multiprocessing import api
_from_str = api.Std.from_str.__func__
def from_str(cls, vm):
    out = _from_str(cls, vm)
    return cls(int(vm)) if out is None else out
api.Std.from_str = classmethod(from_str)
sys.argv = ["torch.distributed.run"] + sys.argv[1:]
runpy.run_module("torch.distributed.run", run_name="__main__", alter_sys=True)
"""


def _launcher():
    from torch.distributed.elastic.multiprocessing import api
    if api.Std.from_str("0") is None:
        return [sys.executable, "-c", LAUNCHER_SHIM], "shim (Std.from_str bug)"
    return [sys.executable, "-m", "torch.distributed.run"], "torch.distributed.run"


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(proto_path, spec, setup, batches, env=None, nproc=2):
    """(exit code, JSON lines of stdout, stderr tail), or raises TimeoutExpired."""
    launcher, _ = _launcher()
    command = launcher + ["--nnodes", "1", "--node_rank", "0", "--nproc_per_node", str(nproc),
                          "--max_restarts", "0", "--master_addr", "127.0.0.1",
                          "--master_port", str(_free_port()),
                          HARNESS, "run", "--spec", spec, "--batches", batches,
                          "--setup", json.dumps(setup), "--warmup", "0", "--steps", "1",
                          "--device", "cpu", "--proto_path", proto_path]
    full_env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", PYTHONDONTWRITEBYTECODE="1")
    full_env.update(env or {})
    done = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
                          env=full_env, check=False)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    return done.returncode, lines, done.stderr[-1500:]


class Checks:
    def __init__(self):
        self.passed, self.failed = 0, []

    def case(self, name, problems):
        if problems:
            self.failed.append(name)
            print(f"FAILED {name}")
            for problem in problems:
                print(f"  {problem}")
        else:
            self.passed += 1
            print(f"ok     {name}")


def check_ddp(proto_path):
    import torch
    from headroom_harness.model_spec import load_spec
    from headroom_harness.models import count_params
    from headroom_harness.program import Program
    from headroom_harness.setups import Setup
    spec_path = os.path.join(MODELS, "simple-cnn.json")
    counts = count_params(load_spec(spec_path))
    rc, lines, stderr = torchrun(proto_path, spec_path, {"gpus": 2, "parallel": "DDP"}, "1,2")
    problems = []
    if rc != 0:
        problems.append(f"exit {rc}: {stderr}")
    events = [line.get("event") for line in lines]
    if events != ["hello", "batch_start", "result", "batch_start", "result"]:
        return problems + [f"rank 0 printed {events}; want hello, then batch_start and "
                           f"result for batches 1 and 2 (only rank 0 prints): {stderr}"]
    hello = lines[0]
    if (hello.get("world_size"), hello.get("backend"), hello.get("parallel")) != (2, "gloo",
                                                                                  "DDP"):
        problems.append(f"hello says world_size {hello.get('world_size')}, backend "
                        f"{hello.get('backend')}, parallel {hello.get('parallel')}")
    # Model states per rank under DDP with gradient_as_bucket_view and AdamW:
    # weights, gradients (the buckets themselves) and two moments, 4 bytes
    # each, plus one 4-byte step counter per parameter tensor.
    tensors = sum(1 for _ in Program(load_spec(spec_path), Setup(),
                                     torch.device("meta")).parameters())
    want = 16 * counts["trainable_params"] + 4 * tensors
    for batch, result in ((1, lines[2]), (2, lines[4])):
        where = f"batch {batch}"
        print(f"  {where}: {json.dumps(result)}")
        if result.get("batch") != batch or result.get("oom") is not False or result.get("error"):
            problems.append(f"{where}: batch {result.get('batch')}, oom {result.get('oom')}, "
                            f"error '{result.get('error')}'")
            continue
        peaks = result.get("rank_peaks_gb")
        if not isinstance(peaks, list) or len(peaks) != 2:
            problems.append(f"{where}: rank_peaks_gb = {peaks}, want 2 entries")
            continue
        if result.get("peak_allocated_gb") != max(peaks):
            problems.append(f"{where}: peak_allocated_gb {result.get('peak_allocated_gb')} is "
                            f"not the largest rank peak {max(peaks)}")
        if abs(result.get("peak_allocated_bytes", 0) / 1e9 - max(peaks)) > 1e-12:
            problems.append(f"{where}: peak_allocated_bytes {result.get('peak_allocated_bytes')}"
                            f" disagrees with the rank peaks {peaks}")
        for rank, peak in enumerate(peaks):
            if round(peak * 1e9) != want:
                problems.append(f"{where}: rank {rank} counted {peak * 1e9:.0f} bytes, want "
                                f"{want} (16 B x {counts['trainable_params']} params + "
                                f"{tensors} step counters): the DDP gradients should be "
                                "the buckets (gradient_as_bucket_view)")
        host = result.get("host_peak_gb")
        if not isinstance(host, float) or host <= 0:
            problems.append(f"{where}: host_peak_gb = {host}, want > 0")
        if not str(result.get("peak_source", "")).startswith("cpu run"):
            problems.append(f"{where}: peak_source '{result.get('peak_source')}' does not say "
                            "it is a CPU run")
        if result.get("steps") != 1 or not (result.get("step_seconds") or 0) > 0:
            problems.append(f"{where}: steps {result.get('steps')}, step_seconds "
                            f"{result.get('step_seconds')}")
    return problems


def check_accum(proto_path):
    """grad_accum 2 under DDP: the first microbatch under no_sync."""
    spec_path = os.path.join(MODELS, "simple-cnn.json")
    rc, lines, stderr = torchrun(proto_path, spec_path,
                                 {"gpus": 2, "parallel": "DDP", "grad_accum": 2}, "4")
    results = [line for line in lines if line.get("event") == "result"]
    if rc != 0 or len(results) != 1:
        return [f"exit {rc}, {len(results)} results: {lines} {stderr}"]
    result = results[0]
    peaks = result.get("rank_peaks_gb")
    if result.get("error") or not isinstance(peaks, list) or len(peaks) != 2 \
            or result.get("steps") != 1:
        return [f"grad_accum 2 under DDP: {result}"]
    return []


def check_fault(proto_path):
    spec_path = os.path.join(MODELS, "simple-cnn.json")
    try:
        rc, lines, stderr = torchrun(proto_path, spec_path, {"gpus": 2, "parallel": "DDP"},
                                     "1,2", env={"HEADROOM_HARNESS_FAULT": "1:0"})
    except subprocess.TimeoutExpired:
        return [f"the group hung: no exit in {RUN_TIMEOUT_S} s after rank 1's OOM"]
    results = [line for line in lines if line.get("event") == "result"]
    problems = []
    if rc == 0:
        problems.append("exit 0: a group with a failed rank must end non-zero so the "
                        "launcher stops every rank")
    if len(results) != 1:
        return problems + [f"{len(results)} result lines, want 1 (the group ends at the "
                           f"failed batch): {lines} {stderr}"]
    result = results[0]
    print(f"  injected OOM: {json.dumps(result)}")
    if result.get("oom") is not True or result.get("failed_rank") != 1 or result.get("batch") != 1:
        problems.append(f"result says oom {result.get('oom')}, failed_rank "
                        f"{result.get('failed_rank')}, batch {result.get('batch')}; want an "
                        "OOM of batch 1 on rank 1")
    return problems


def check_fsdp(proto_path):
    from headroom_harness.distributed import fsdp_module
    from headroom_harness.errors import SpecError
    spec_path = os.path.join(MODELS, "simple-cnn.json")
    rc, lines, stderr = torchrun(proto_path, spec_path, {"gpus": 2, "parallel": "FSDP_FULL"}, "1")
    results = [line for line in lines if line.get("event") == "result"]
    if rc != 0 or len(results) != 1:
        return [f"exit {rc}, {len(results)} results: {lines} {stderr}"]
    result = results[0]
    print(f"  fsdp-full: {json.dumps(result)}")
    try:
        fsdp_module()
    except SpecError as error:
        # This torch cannot run FSDP: the batch's failure record says why.
        if result.get("error") != str(error) or result.get("rank_peaks_gb") is not None:
            return [f"error '{result.get('error')}', want '{error}' and no peaks"]
        print("  (FSDP does not import in this torch: the failure record was checked, "
              "not an FSDP run)")
        return []
    peaks = result.get("rank_peaks_gb")
    if result.get("error") or not isinstance(peaks, list) or len(peaks) != 2:
        return [f"FSDP imports here, so the run must succeed with 2 rank peaks: {result}"]
    return []


def check_refusals(proto_path):
    from headroom_harness.distributed import parallel_unsupported
    from headroom_harness.errors import SpecError
    from headroom_harness.setups import parse_setup
    problems = []
    for setup, want in (({"gpus": 4, "tensor_parallel": 2},
                         "tensor parallel is not run by the harness"),
                        ({"gpus": 2, "parallel": "ZERO2"}, "DeepSpeed"),
                        ({"gpus": 4, "nodes": 2}, "the harness runs one node"),
                        ({"gpus": 2, "parallel": "FSDP_FULL", "offload": "OPTIMIZER"},
                         "FSDP has no optimizer-only offload")):
        got = parallel_unsupported(parse_setup(json.dumps(setup)))
        if want == "FSDP has no optimizer-only offload" and got and "does not import" in got:
            continue  # this torch stops at the import
        if got is None or want not in got:
            problems.append(f"setup {setup}: unsupported = {got!r}, want it to say '{want}'")
    for setup, want in (({"gpus": 2, "parallel": "DDP", "offload": "PARAMS"}, "setup.offload"),
                        ({"gpus": 3, "tensor_parallel": 2}, "setup.tensor_parallel"),
                        ({"gpus": 600}, "setup.gpus")):
        try:
            parse_setup(json.dumps(setup))
            problems.append(f"setup {setup} was accepted; want an error naming {want}")
        except SpecError as error:
            if want not in str(error):
                problems.append(f"setup {setup}: '{error}' does not name {want}")
    # A parallel setup on one GPU runs its strategy in a group of one, which
    # the harness starts itself (no launcher): one rank peak.
    done = subprocess.run([sys.executable, HARNESS, "run", "--spec",
                           os.path.join(MODELS, "simple-cnn.json"), "--batches", "1",
                           "--setup", '{"parallel": "DDP"}', "--device", "cpu", "--warmup",
                           "0", "--steps", "1", "--proto_path", proto_path],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    one = [line for line in lines if line.get("event") == "result"]
    if (done.returncode != 0 or len(one) != 1 or one[0].get("world_size") != 1
            or not isinstance(one[0].get("rank_peaks_gb"), list)
            or len(one[0]["rank_peaks_gb"]) != 1 or one[0].get("error")):
        problems.append(f"parallel DDP on one GPU: exit {done.returncode}, {lines} "
                        f"{done.stderr[-300:]}")
    # A multi-GPU setup outside the launcher is bad input, not a one-GPU run.
    done = subprocess.run([sys.executable, HARNESS, "run", "--spec",
                           os.path.join(MODELS, "simple-cnn.json"), "--batches", "1",
                           "--setup", '{"gpus": 2}', "--device", "cpu",
                           "--proto_path", proto_path],
                          capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False)
    if done.returncode != 2 or "--nproc_per_node 2" not in done.stdout:
        problems.append(f"gpus 2 without torch.distributed.run: exit {done.returncode}, "
                        f"{done.stdout.strip()[:300]}")
    return problems


def check_units():
    """FSDP's grouping computes exactly what the plain program does."""
    import torch
    from headroom_harness.model_spec import load_spec
    from headroom_harness.program import Program, Unit
    from headroom_harness.setups import Setup
    problems = []
    for name in ("eeg-conformer", "patch-tst"):
        spec = load_spec(os.path.join(MODELS, name + ".json"))
        want_units = sum(layer.repeat for layer in spec.layers if (layer.repeat or 1) > 1)
        for checkpointing in (False, True):
            setup = Setup(activation_checkpointing=checkpointing)
            out = []
            for units in (False, True):
                torch.manual_seed(0)
                program = Program(spec, setup, torch.device("cpu"), fsdp_units=units)
                # FSDP gathers a unit's weights in that module's forward: every
                # unit must run through it, once per forward.
                calls = []
                for module in program.modules():
                    if isinstance(module, Unit):
                        module.register_forward_pre_hook(lambda m, _: calls.append(m))
                torch.manual_seed(1)
                loss = program(program.make_batch(2, torch.device("cpu")))
                if units and sorted(map(id, calls)) != sorted(
                        id(m) for m in program.modules() if isinstance(m, Unit)):
                    problems.append(f"{name}: {len(calls)} unit forwards in one step, want "
                                    "each unit's forward once")
                loss.backward()
                grads = sum(p.grad.double().abs().sum().item() for p in program.parameters()
                            if p.grad is not None)
                count = sum(1 for m in program.modules() if isinstance(m, Unit))
                out.append((loss.item(), grads, count))
            where = f"{name} (checkpointing {checkpointing})"
            (loss0, grads0, _), (loss1, grads1, count) = out
            if count != want_units or want_units == 0:
                problems.append(f"{where}: {count} FSDP units, want {want_units} (each copy "
                                "of a top-level repeated layer)")
            if abs(loss0 - loss1) > 1e-5 * max(1, abs(loss0)) or \
                    abs(grads0 - grads1) > 1e-5 * max(1, grads0):
                problems.append(f"{where}: grouped loss {loss1} / grads {grads1} differ from "
                                f"the plain program's {loss0} / {grads0}")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proto_path", help="folder of the generated headroom/v1/*_pb2.py")
    args = parser.parse_args()
    try:
        import torch
        import torch.distributed as dist
        if not dist.is_available() or not dist.is_gloo_available():
            raise ImportError("torch.distributed with gloo is not available")
        from torch.distributed.elastic.multiprocessing import api  # noqa: F401
    except ImportError as error:
        print(f"SKIPPED: {error} (python3 is {sys.executable})")
        return EXIT_SKIPPED
    sys.path.insert(0, HERE)
    sys.dont_write_bytecode = True
    from headroom_harness.errors import SpecError
    from headroom_harness.proto import load_proto
    try:
        model_pb2, _ = load_proto(args.proto_path)
    except SpecError as error:
        print(f"FAILED: {error}")
        return 1
    proto_path = os.path.dirname(os.path.dirname(os.path.dirname(
        model_pb2.__file__)))
    print(f"torch {torch.__version__}, launcher: {_launcher()[1]}")
    checks = Checks()
    checks.case("ddp: 2 ranks of simple-cnn on gloo, rank peaks and host memory",
                check_ddp(proto_path))
    checks.case("ddp: grad_accum 2 (no_sync on the first microbatch)", check_accum(proto_path))
    checks.case("ddp: an OOM on rank 1 mid-step is the batch's OOM, no hang",
                check_fault(proto_path))
    checks.case("fsdp-full: a run, or a failure record saying why not", check_fsdp(proto_path))
    checks.case("setups the harness does not run, bad parallel setups, a group of one",
                check_refusals(proto_path))
    checks.case("fsdp units compute what the plain program computes", check_units())
    print(f"{checks.passed} passed, {len(checks.failed)} failed")
    return 0 if not checks.failed else 1


if __name__ == "__main__":
    sys.exit(main())
