#!/usr/bin/env python3
"""Which GPU kinds a training job fits on, tightest first.

What a Slurm job_submit plugin's wrapper (to pick or check --gres) or a Ray
placement hook (to pick a node's accelerator_type) would call before
placing a job:

    with Client(server) as planner:
        kinds = fitting_gpus(planner, "bert-base", 32, ["L4", "H100"])

Only FITS counts (device upper bound * headroom <= card); a BORDERLINE
card may OOM, so it is left out. Tightest first means the least memory left
over (card - what the device holds at the job's largest phase: reserved
memory plus the CUDA context and NCCL), so the job takes the smallest card
it fits and leaves the large ones free.

    PYTHONPATH=OUTDIR python3 client/python/examples/placement_hook.py \\
        --server 127.0.0.1:50051 --model bert-base --batch 32 --gpu L4,H100

prints the kinds one per line with the GB left over; exit 1 when the job
fits none, 2 when the planner cannot answer (or refuses the setup).
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from headroom_client import Client, HeadroomError


def fitting_gpus(planner: Client, model, batch: int, gpu_kinds: Sequence[str],
                 **setup) -> list[str]:
    """The entries of gpu_kinds (catalog names, or sizes in GB) on which
    `model` at `batch` FITS, ordered by memory left over, least first.
    setup: Client.check_fit's keyword arguments (precision, optimizer ...).
    Raises HeadroomError when the planner cannot answer."""
    return [kind for kind, _ in _fitting(planner, model, batch, gpu_kinds, **setup)]


def _fitting(planner: Client, model, batch: int, gpu_kinds: Sequence[str],
             **setup) -> list[tuple[str, float]]:
    answer = planner.check_fit(model, [batch], list(gpu_kinds), **setup)
    # Targets come back in request order, so each pairs with its kind.
    left_over = [(kind, target.memory_gb - target.device_gb(batch))
                 for kind, target in zip(gpu_kinds, answer.targets)
                 if target.verdicts[batch] == "FITS"]
    return sorted(left_over, key=lambda pair: pair[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default="127.0.0.1:50051")
    parser.add_argument("--model", required=True,
                        help="catalog template, or a spec / config.json file")
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--gpu", required=True,
                        help="candidate kinds, comma-separated: L4,H100,48")
    parser.add_argument("--setup", action="append", default=[], metavar="KEY=VALUE",
                        help="a setup keyword as the CLI flag of that name, e.g. "
                             "precision=bf16, gpus=8, parallel=fsdp-full (repeatable)")
    parser.add_argument("--token")
    parser.add_argument("--ca", help="PEM root certificates: use TLS")
    args = parser.parse_args()
    kinds = [kind for kind in args.gpu.split(",") if kind]
    setup = dict(item.partition("=")[::2] for item in args.setup)
    try:
        with Client(args.server, token=args.token, ca=args.ca) as planner:
            fitting = _fitting(planner, args.model, args.batch, kinds, **setup)
    except HeadroomError as e:
        print(f"placement_hook: {e}", file=sys.stderr)
        return 2
    if not fitting:
        print(f"{args.model} at batch {args.batch} fits none of {', '.join(kinds)}")
        return 1
    for kind, gb in fitting:
        print(f"{kind}\t{gb:.2f} GB left over")
    return 0


if __name__ == "__main__":
    sys.exit(main())
