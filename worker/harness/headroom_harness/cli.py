"""What each command does: count, run (one process, or one rank of a
torch.distributed group) and generate. headroom_torch_probe.py calls main."""

import platform

import torch

from headroom_harness import flags, records
from headroom_harness.distributed import (Group, distributed_env, run_batches_distributed,
                                          single_rank_env)
from headroom_harness.energy import run_generation
from headroom_harness.errors import EXIT_BAD_INPUT, SpecError
from headroom_harness.model_spec import load_spec
from headroom_harness.memory import apply_alloc_conf
from headroom_harness.models import count_params
from headroom_harness.phases import run_batches
from headroom_harness.program import Program
from headroom_harness.proto import load_proto
from headroom_harness.setups import has_parallel, parse_setup
from headroom_harness.torch_support import HAS_SDPA, torch_at_least


def _device(name):
    """--device as a torch.device (default: cuda when torch sees one, else
    cpu); SpecError when this torch cannot use it."""
    if name is None:
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise SpecError(f"--device {name} is unknown; allowed cuda, cuda:N, cpu") from None
    if device.type not in ("cuda", "cpu"):
        raise SpecError(f"--device {name} is unknown; allowed cuda, cuda:N, cpu")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise SpecError(f"--device {name}: this torch ({torch.__version__}) sees no "
                            "CUDA device")
        index = device.index if device.index is not None else torch.cuda.current_device()
        if index >= torch.cuda.device_count():
            raise SpecError(f"--device {name}: only {torch.cuda.device_count()} CUDA "
                            "device(s) are visible")
        device = torch.device("cuda", index)
    return device


def _hello(device, params):
    """run's first line: this torch, the device and the spec's parameters."""
    cuda = device.type == "cuda"
    props = torch.cuda.get_device_properties(device) if cuda else None
    return {"event": "hello", "torch": torch.__version__, "cuda": torch.version.cuda,
            "device": str(device),
            "device_name": props.name if cuda else (platform.processor() or "cpu"),
            "total_memory_bytes": props.total_memory if cuda else None,
            "params": params,
            "sdpa": HAS_SDPA}


def main(argv=None):
    """Runs one command line; the exit code (0, or EXIT_BAD_INPUT after one
    error line naming what was wrong)."""
    parser = flags.parser()
    env = None
    try:
        env = distributed_env()
    except SpecError as error:
        records.emit({"event": "error", "error": str(error)})
        return EXIT_BAD_INPUT
    if env is not None and env[0] != 0:
        records.EMITS[0] = False  # rank 0 alone prints
    args = parser.parse_args(argv)
    if args.command == "generate":
        try:
            flags.check_generate(args)
            device = _device(args.device)
        except SpecError as error:
            records.emit({"event": "error", "error": str(error)})
            return EXIT_BAD_INPUT
        run_generation(args.hf_config, args.quant, device, args.prompt_tokens,
                       args.new_tokens, args.warmup, args.idle_s)
        return 0
    try:
        load_proto(args.proto_path)
        spec = load_spec(args.spec)
        setup = parse_setup(args.setup)
        if args.command == "count":
            records.emit(dict({"name": spec.name}, **count_params(spec, setup)))
            return 0
        batches = flags.check_run(args, setup, env[1] if env is not None else 1)
        # Before anything initialises CUDA: the allocator reads it once.
        apply_alloc_conf(setup.expandable_segments)
        device = _device(args.device) if env is None else torch.device(
            "cpu" if args.device == "cpu" else "cuda")
        if (setup.expandable_segments and device.type == "cuda"
                and not torch_at_least(2, 1)):
            raise SpecError("setup.expandable_segments = true needs torch >= 2.1 "
                            "(PYTORCH_CUDA_ALLOC_CONF expandable_segments), found "
                            f"{torch.__version__}; allowed false on this torch")
        # A parallel setup on one GPU (the planner counts its buckets or
        # gathered units too) runs its strategy in a group of one; without
        # the launcher the harness starts that group itself.
        parallel = has_parallel(setup)
        if parallel and env is None:
            env = single_rank_env()
        if device.type == "cuda" and not torch.cuda.is_available():
            raise SpecError(f"--device {args.device}: this torch ({torch.__version__}) sees "
                            "no CUDA device")
        # Build once on meta: a spec that cannot be built fails here, before
        # any batch, and the hello line can carry the parameter count.
        meta = Program(spec, setup, torch.device("meta"))
        params = sum(p.numel() for p in meta.parameters())
        del meta
        group = Group(env, device) if parallel else None
    except SpecError as error:
        records.emit({"event": "error", "error": str(error)})
        return EXIT_BAD_INPUT
    compile_model = args.compile or setup.compile
    if group is None:
        records.emit(_hello(device, params))
        run_batches(spec, setup, device, batches, args.warmup, args.steps, compile_model)
        return 0
    hello = _hello(group.device, params)
    hello.update({"world_size": group.world, "backend": group.backend,
                  "parallel": setup.parallel})
    records.emit(hello)
    run_batches_distributed(spec, setup, group, batches, args.warmup, args.steps,
                            compile_model)
    group.close()
    return 0

