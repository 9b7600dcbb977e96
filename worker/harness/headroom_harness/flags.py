"""The command line: the parser and the checks of every flag's value, each
error naming the flag and what is allowed. No torch here: the flags are
tested without it (cli.py runs the commands)."""

import argparse
import re
import sys

from headroom_harness.errors import EXIT_BAD_INPUT, SpecError
from headroom_harness.model_spec import MAX_DIMENSION
from headroom_harness.proto import PROTO_ENV
from headroom_harness.records import emit

# Limits of the run command, so a mistyped flag cannot loop for hours.
MAX_BATCH = 1 << 20
MAX_STEPS = 1000
# The generate command's quantizations and token limit.
QUANTS = ("fp16", "nf4", "int8")
MAX_GENERATION_TOKENS = 8192


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        emit({"event": "error", "error": f"bad flags: {message}"})
        sys.exit(EXIT_BAD_INPUT)


def parser():
    """The harness's parser: count, run and generate. A flag it cannot parse
    prints one error line and exits EXIT_BAD_INPUT."""
    out = _Parser(description="Build a Headroom model spec in PyTorch and measure it.")
    sub = out.add_subparsers(dest="command", required=True)
    count = sub.add_parser("count", help="parameter counts, built on the meta device")
    count.add_argument("--spec", required=True)
    count.add_argument("--setup")
    for command in (count,):
        command.add_argument("--proto_path")
    run = sub.add_parser("run", help="measure training steps at each batch")
    run.add_argument("--spec", required=True)
    run.add_argument("--batches", required=True)
    run.add_argument("--setup")
    run.add_argument("--warmup", type=int, default=1)
    run.add_argument("--steps", type=int, default=3)
    run.add_argument("--device")
    run.add_argument("--positions", type=int)
    run.add_argument("--proto_path",
                     help="folder holding headroom/v1/model_pb2.py (default: "
                          f"${PROTO_ENV}, then next to this script, share/headroom/python, "
                          "build/python)")
    run.add_argument("--compile", action="store_true",
                     help="run the forward through torch.compile (torch >= 2.0; "
                          "older torch gives each batch an error result)")
    gen = sub.add_parser("generate", help="an energy probe's generation window")
    gen.add_argument("--hf_config", required=True)
    gen.add_argument("--quant", required=True)
    gen.add_argument("--prompt_tokens", type=int, default=64)
    gen.add_argument("--new_tokens", type=int, default=128)
    gen.add_argument("--warmup", type=int, default=1)
    gen.add_argument("--device")
    gen.add_argument("--idle_s", type=float, default=1.0)
    return out


def parse_batches(text):
    """--batches: a comma-separated list of batch sizes, each 1..MAX_BATCH."""
    batches = []
    for part in text.split(","):
        if not re.fullmatch(r"\s*[0-9]+\s*", part) or not 1 <= int(part) <= MAX_BATCH:
            raise SpecError(f"--batches {text}: '{part}' is not a batch size; allowed "
                            f"a comma-separated list of 1..{MAX_BATCH}")
        batches.append(int(part))
    return batches


def check_generate(args):
    """generate's flags (but --device, which needs torch); SpecError names
    the first one out of range."""
    if args.quant not in QUANTS:
        raise SpecError(f"--quant {args.quant} is unknown; allowed {', '.join(QUANTS)}")
    for flag, value, low in (("--prompt_tokens", args.prompt_tokens, 1),
                             ("--new_tokens", args.new_tokens, 1)):
        if not low <= value <= MAX_GENERATION_TOKENS:
            raise SpecError(f"{flag} {value} is out of range; allowed "
                            f"{low}..{MAX_GENERATION_TOKENS}")
    if not 0 <= args.warmup <= 10:
        raise SpecError(f"--warmup {args.warmup} is out of range; allowed 0..10")
    if not 0 <= args.idle_s <= 60:
        raise SpecError(f"--idle_s {args.idle_s} is out of range; allowed 0..60")


def check_run(args, setup, world):
    """run's flags after the spec and the setup are read: --positions
    overrides the setup's; returns the batch sizes. `world` is how many
    processes run (the launcher's WORLD_SIZE, else 1): a multi-GPU setup
    needs one per GPU. SpecError names the first flag out of range."""
    if args.positions is not None:
        if not 1 <= args.positions <= MAX_DIMENSION:
            raise SpecError(f"--positions {args.positions} is out of range; allowed "
                            f"1..{MAX_DIMENSION}")
        setup.positions = args.positions
    batches = parse_batches(args.batches)
    for flag, value, low in (("--warmup", args.warmup, 0), ("--steps", args.steps, 1)):
        if not low <= value <= MAX_STEPS:
            raise SpecError(f"{flag} {value} is out of range; allowed {low}..{MAX_STEPS}")
    if max(1, setup.gpus) != world:
        raise SpecError(
            f"setup.gpus = {setup.gpus} but {world} process(es) run: a multi-GPU setup "
            f"runs under python -m torch.distributed.run --nproc_per_node {setup.gpus} "
            "(the worker's torch executor starts it so), one process per GPU")
    return batches
