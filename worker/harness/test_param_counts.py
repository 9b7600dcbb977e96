#!/usr/bin/env python3
"""The torch harness builds the planner's graph: same parameter counts.

For every template in --models, the harness's torch model (built on the meta
device, in process) must have exactly the parameters and trainable
parameters that `headroom model inspect FILE --json` reports. Then a smoke
run trains the smallest template on the CPU at batches 1 and 2 and checks
the JSON lines the worker reads.

  python3 worker/harness/test_param_counts.py \
      --headroom build/client/headroom --models models

Exit 0 when everything agrees, 1 on any mismatch (named), 77 (skipped)
when python3 has no torch.
"""

import argparse
import glob
import json
import os
import subprocess
import sys

EXIT_SKIPPED = 77
# Generous per-call limits; the whole test takes well under a minute.
INSPECT_TIMEOUT_S = 15
SMOKE_TIMEOUT_S = 120
SMOKE_TEMPLATE = "simple-cnn"

HERE = os.path.dirname(os.path.abspath(__file__))
HARNESS = os.path.join(HERE, "headroom_torch_probe.py")
PROTO_PATH = [None]


# (label, CLI flags, the same setup as TrainingSetup JSON for the harness).
SETUPS = [
    ("fp32", [], {}),
    ("bf16-true", ["--precision", "bf16-true"], {"precision": "BF16_TRUE"}),
    ("lora-qv-r8", ["--lora_rank", "8", "--lora_targets", "q,v"],
     {"lora": {"rank": 8, "targets": ["q", "v"]}}),
    ("lora-all-r8", ["--lora_rank", "8", "--lora_targets", "all-linear"],
     {"lora": {"rank": 8, "targets": ["all-linear"]}}),
    ("qlora-nf4", ["--lora_rank", "8", "--lora_targets", "all-linear",
                   "--quant_base", "nf4"],
     {"lora": {"rank": 8, "targets": ["all-linear"]}, "quantBase": "NF4"}),
    ("last-block", ["--train_last_blocks", "1"], {"freeze": {"trainLastBlocks": 1}}),
    ("freeze-first", None, None),  # filled per template: its first layer's name
    ("adafactor", ["--optimizer", "adafactor"], {"optimizer": "ADAFACTOR"}),
    ("lion", ["--optimizer", "lion"], {"optimizer": "LION"}),
]
COUNTS = ("params", "trainable_params", "frozen_params", "adapter_params",
          "quantized_params")


def _camel(name):
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def planner_counts(headroom, path, flags=()):
    """The five counts from the planner's CLI under the setup flags, or
    None when the planner refuses the setup (said in its message)."""
    done = subprocess.run([headroom, "model", "inspect", path, "--json", *flags],
                          capture_output=True, text=True, timeout=INSPECT_TIMEOUT_S,
                          check=False)
    # Exit 2 is a refused input; the message names the setup field or flag
    # (the CLI prints messages without status codes).
    if done.returncode == 2 and ("setup." in done.stderr or "--" in done.stderr):
        return None
    if done.returncode != 0:
        raise RuntimeError(f"headroom model inspect exited {done.returncode}: "
                           f"{(done.stderr or done.stdout).strip()[:300]}")
    report = json.loads(done.stdout)
    # Protobuf's JSON mapping leaves zero fields out.
    out = {name: int(report.get(_camel(name), report.get(name, 0))) for name in COUNTS}
    if "trainableParams" not in report and "trainable_params" not in report:
        out["trainable_params"] = 0
    return out


def _setups_for(spec):
    for label, flags, setup in SETUPS:
        if label == "freeze-first":
            name = next((layer.name for layer in spec.layers if layer.name), None)
            if name is None:
                continue
            flags, setup = ["--freeze", name], {"freeze": {"layers": [name]}}
        yield label, flags, setup


def compare_counts(headroom, files):
    """Prints one line per template and setup; returns the mismatches and
    how many (template, setup) pairs were compared."""
    from headroom_harness.errors import SpecError
    from headroom_harness.model_spec import load_spec
    from headroom_harness.models import count_params
    from headroom_harness.setups import parse_setup
    failures, compared = [], 0
    hung = set()  # setups the planner timed out on: not asked again
    print(f"{'template':<22} {'setup':<13} {'planner (params/train/frozen/adapter/quant)':>50}"
          f"  result")
    for path in files:
        label = os.path.basename(path)[: -len(".json")]
        try:
            spec = load_spec(path)
        except Exception as error:
            print(f"{label:<22} ERROR {type(error).__name__}: {error}")
            failures.append(label)
            continue
        label = spec.name
        for setup_label, flags, setup_json in _setups_for(spec):
            where = f"{label}/{setup_label}"
            if setup_label in hung:
                compared += 1
                failures.append(where)
                continue
            try:
                setup = parse_setup(json.dumps(setup_json))
                try:
                    have = count_params(spec, setup)
                except SpecError as error:
                    have = f"refused: {error}"
                want = planner_counts(headroom, path, flags)
            except subprocess.TimeoutExpired:
                print(f"{label:<22} {setup_label:<13} ERROR headroom model inspect "
                      f"{' '.join(flags)} did not answer in {INSPECT_TIMEOUT_S} s; "
                      "this setup is not asked again (every later template fails)")
                hung.add(setup_label)
                compared += 1
                failures.append(where)
                continue
            except Exception as error:  # a template either side cannot read
                print(f"{label:<22} {setup_label:<13} ERROR {type(error).__name__}: {error}")
                failures.append(where)
                continue
            if want is None and isinstance(have, str):
                continue  # both refuse (no repeated block, say)
            compared += 1
            if isinstance(have, str) or want is None:
                print(f"{label:<22} {setup_label:<13} MISMATCH planner {want}, harness {have}")
                failures.append(where)
                continue
            ok = all(have[k] == want[k] for k in COUNTS)
            if not ok:
                failures.append(where)
            text = "/".join(f"{want[k]:,}" for k in COUNTS)
            print(f"{label:<22} {setup_label:<13} {text:>50}  "
                  f"{'ok' if ok else 'MISMATCH harness ' + str(have)}")
    return failures, compared


def smallest_template(files):
    from headroom_harness.model_spec import load_spec
    from headroom_harness.models import count_params
    for path in files:
        if os.path.basename(path) == SMOKE_TEMPLATE + ".json":
            return path
    return min(files, key=lambda path: count_params(load_spec(path))["params"])


def smoke_run(path, want_params):
    """Runs the harness on the CPU at batches 1,2; returns problems found."""
    command = [sys.executable, HARNESS, "run", "--spec", path, "--batches", "1,2",
               "--proto_path", PROTO_PATH[0],
               "--warmup", "0", "--steps", "1", "--device", "cpu"]
    try:
        done = subprocess.run(command, capture_output=True, text=True,
                              timeout=SMOKE_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        return [f"run did not finish in {SMOKE_TIMEOUT_S} s"]
    problems = []
    if done.returncode != 0:
        problems.append(f"run exited {done.returncode}: {done.stderr.strip()[:300]}")
    try:
        lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    except json.JSONDecodeError as error:
        return problems + [f"stdout is not JSON lines: {error}: {done.stdout[:300]}"]
    events = [line.get("event") for line in lines]
    if events != ["hello", "batch_start", "result", "batch_start", "result"]:
        return problems + [f"events are {events}; want hello, then batch_start and "
                           "result for batches 1 and 2"]
    hello = lines[0]
    if hello.get("params") != want_params:
        problems.append(f"hello.params = {hello.get('params')}, want {want_params}")
    if hello.get("device") != "cpu" or hello.get("total_memory_bytes") is not None:
        problems.append(f"hello on cpu says device {hello.get('device')} and "
                        f"total_memory_bytes {hello.get('total_memory_bytes')}")
    for batch, result in ((1, lines[2]), (2, lines[4])):
        where = f"result for batch {batch}"
        if result.get("batch") != batch:
            problems.append(f"{where} has batch {result.get('batch')}")
        if result.get("oom") is not False or result.get("error") != "":
            problems.append(f"{where}: oom {result.get('oom')}, error "
                            f"'{result.get('error')}'")
        seconds = result.get("step_seconds")
        if not isinstance(seconds, float) or seconds <= 0:
            problems.append(f"{where}: step_seconds = {seconds}, want > 0")
        if result.get("steps") != 1:
            problems.append(f"{where}: steps = {result.get('steps')}, want 1")
        for field in ("peak_allocated_bytes", "peak_reserved_bytes"):
            if result.get(field, "missing") is not None:
                problems.append(f"{where}: {field} = {result.get(field)}, want null on cpu")
    return problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--headroom", required=True, help="the headroom CLI binary")
    parser.add_argument("--models", required=True, help="folder of template specs")
    parser.add_argument("--proto_path", help="folder of the generated headroom/v1/*_pb2.py")
    args = parser.parse_args()
    try:
        import torch  # noqa: F401  (only whether it imports)
    except ImportError as error:
        print(f"SKIPPED: python3-torch not installed ({error}; "
              f"python3 is {sys.executable})")
        return EXIT_SKIPPED
    sys.path.insert(0, HERE)
    sys.dont_write_bytecode = True  # no __pycache__ left in the source tree
    from headroom_harness.errors import SpecError
    from headroom_harness.model_spec import load_spec
    from headroom_harness.models import count_params
    from headroom_harness.proto import load_proto
    try:
        model_pb2, _ = load_proto(args.proto_path)
    except SpecError as error:
        print(f"FAILED: {error}")
        return 1
    PROTO_PATH[0] = os.path.dirname(os.path.dirname(os.path.dirname(
        model_pb2.__file__)))

    if not os.access(args.headroom, os.X_OK):
        print(f"FAILED: --headroom {args.headroom} is not an executable; build it with "
              "ninja -C build headroom")
        return 1
    files = sorted(glob.glob(os.path.join(args.models, "*.json")))
    if not files:
        print(f"FAILED: --models {args.models} holds no *.json templates")
        return 1

    failures, compared = compare_counts(args.headroom, files)
    smoke = smallest_template(files)
    smoke_params = count_params(load_spec(smoke))["params"]
    problems = smoke_run(smoke, smoke_params)
    print(f"\nsmoke run of {os.path.basename(smoke)} on cpu at batches 1,2: "
          f"{'ok' if not problems else 'FAILED'}")
    for problem in problems:
        print(f"  {problem}")

    matched = compared - len(failures)
    print(f"\n{matched} of {compared} (template, setup) pairs over {len(files)} templates "
          "match the planner's five counts")
    if failures:
        print(f"mismatched: {', '.join(failures)}")
    passed = matched + (0 if problems else 1)
    print(f"{passed} passed, {compared + 1 - passed} failed")
    return 0 if not failures and not problems else 1


if __name__ == "__main__":
    sys.exit(main())
