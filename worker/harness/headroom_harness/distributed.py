"""Multi-GPU runs: the same steps under torch.distributed (DDP, FSDP).

The torch executor starts `python -m torch.distributed.run --nnodes 1
--nproc_per_node N` with CUDA_VISIBLE_DEVICES = the assignment's GPUs; each
rank runs the harness with RANK, WORLD_SIZE and LOCAL_RANK set, on
cuda:LOCAL_RANK (NCCL), or on the CPU with gloo (the test). Only rank 0
prints. A batch that succeeds on every rank ends in an all_gather_object
of every rank's figures and rank 0's result line. A failure (an OOM) can
strike one rank inside backward while the others wait in a gradient
all-reduce, where no in-band flag can reach them; so a failing rank posts
its record in the rendezvous store (out of band), rank 0's watcher thread
prints the batch's result from it, and the whole group exits
EXIT_GROUP_FAILED, which makes torch.distributed.run stop every rank.
"""

import datetime
import functools
import gc
import importlib
import json
import os
import re
import resource
import socket
import sys
import threading

import torch

from headroom_harness.energy import open_nvml
from headroom_harness.errors import SpecError
from headroom_harness.frameworks import fsdp_flavour
from headroom_harness.optimizers import optimizer_impl
from headroom_harness.memory import PhaseMeter
from headroom_harness.phases import (CudaStats, batch_outcome, cuda_peaks, measure_batch,
                                     unmeasured_phases)
from headroom_harness.program import Unit
from headroom_harness.records import (Measurement, emit, group_result, mean_step_seconds,
                                      unsupported_result)
from headroom_harness.setups import FSDP_STRATEGIES, MAX_GPUS

# DDP's bucket size (kDdpBucketBytes in parallel.h: 25 MiB, bucket_cap_mb).
DDP_BUCKET_CAP_MB = 25
EXIT_GROUP_FAILED = 3
# How long a failing rank waits for rank 0 to have printed its record, and
# rank 0's watcher for a batch's end (the executor's batch timeout kills
# the group before either matters).
REPORT_WAIT_S = 120
WATCH_WAIT_S = 60
MAX_WATCH_WAITS = 24 * 60
# Test hook: "RANK:STEP" makes that rank raise an injected CUDA OOM after
# the forward of that step (its peers then wait in backward's all-reduce).
FAULT_ENV = "HEADROOM_HARNESS_FAULT"


def single_rank_env():
    """A group of one started by the harness itself: rank 0 hosts the store
    on a free loopback port."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
                       "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(port)})
    return 0, 1, 0, 1


def distributed_env():
    """(rank, world_size, local_rank, local_world_size) from the launcher's
    environment, or None when not launched by torch.distributed.run."""
    names = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
    if not all(name in os.environ for name in names):
        return None
    values = []
    for name in names + ("LOCAL_WORLD_SIZE",):
        text = os.environ.get(name, os.environ["WORLD_SIZE"])
        if not re.fullmatch(r"[0-9]{1,4}", text):
            raise SpecError(f"${name} = '{text[:16]}' is not a rank; allowed 0..{MAX_GPUS}")
        values.append(int(text))
    rank, world, local, local_world = values
    if not (1 <= world <= MAX_GPUS and rank < world and local < local_world <= world):
        raise SpecError(f"$RANK {rank}, $WORLD_SIZE {world}, $LOCAL_RANK {local}, "
                        f"$LOCAL_WORLD_SIZE {local_world} do not agree")
    return rank, world, local, local_world


def fsdp_module():
    """torch.distributed.fsdp, or SpecError saying why it does not import."""
    try:
        import torch.distributed.fsdp as fsdp
        return fsdp
    except Exception as error:  # Debian's 1.13 under Python 3.11 fails here
        raise SpecError(f"torch.distributed.fsdp does not import in torch {torch.__version__}: "
                        f"{type(error).__name__}: {str(error)[:200]}") from None


def parallel_unsupported(setup):
    """Why the harness cannot run this parallel setup (the batches' failure
    record), or None."""
    if max(1, setup.tensor_parallel) > 1:
        return (f"setup.tensor_parallel = {setup.tensor_parallel}: tensor parallel is not run "
                "by the harness (it runs data parallel: DDP and FSDP)")
    if setup.nodes > 1:
        return (f"setup.nodes = {setup.nodes}: the harness runs one node "
                "(torch.distributed.run --nnodes 1)")
    if setup.parallel.startswith("ZERO"):
        try:
            import deepspeed  # noqa: F401
        except Exception as error:
            return (f"setup.parallel = {setup.parallel}: DeepSpeed is not installed in the "
                    f"harness (import deepspeed: {type(error).__name__}: {str(error)[:120]})")
        return (f"setup.parallel = {setup.parallel}: DeepSpeed imports, but the harness does "
                "not run ZeRO (it runs DDP and FSDP)")
    if setup.optimizer_in_backward:
        return ("setup.optimizer_in_backward is not run under torch.distributed by the "
                "harness (a step per parameter in backward would race DDP's all-reduce)")
    if setup.parallel in FSDP_STRATEGIES and fsdp_flavour(setup)[0] == "fsdp2":
        try:
            fully_shard_module()
        except SpecError as error:
            return f"setup.parallel = {setup.parallel} under {setup.framework}: {error}"
        if setup.parallel != "FSDP_FULL" or setup.offload != "OFFLOAD_UNSPECIFIED":
            return (f"setup.parallel = {setup.parallel}, offload = {setup.offload} under "
                    f"{setup.framework}: the harness runs FSDP2 (fully_shard) as FSDP_FULL "
                    "without offload only")
        if setup.quant_base != "BASE_QUANT_UNSPECIFIED":
            return (f"setup.quant_base = {setup.quant_base} under FSDP2 is not run by the "
                    "harness (its 4-bit layers are not DTensor subclasses)")
    elif setup.parallel in FSDP_STRATEGIES:
        try:
            fsdp = fsdp_module()
        except SpecError as error:
            return str(error)
        if not hasattr(fsdp.ShardingStrategy, FSDP_STRATEGIES[setup.parallel]):
            return (f"setup.parallel = {setup.parallel}: ShardingStrategy."
                    f"{FSDP_STRATEGIES[setup.parallel]} is not in torch {torch.__version__}")
        if setup.quant_base != "BASE_QUANT_UNSPECIFIED":
            return (f"setup.quant_base = {setup.quant_base} under FSDP is not run by the "
                    "harness (bitsandbytes' quantized weights are not flattened into FSDP's "
                    "parameters here); QLoRA runs under DDP")
        if setup.offload == "OPTIMIZER":
            return ("setup.offload = OPTIMIZER under FSDP: FSDP has no optimizer-only offload "
                    "(CPUOffload moves the parameter shards with their gradients and step); "
                    "allowed PARAMS or BOTH under FSDP")
    return None


def fully_shard_module():
    """torch's FSDP2 fully_shard and MixedPrecisionPolicy (torch >= 2.6
    torch.distributed.fsdp, 2.4 .. 2.5 torch.distributed._composable.fsdp),
    or SpecError naming the torch found."""
    for path in ("torch.distributed.fsdp", "torch.distributed._composable.fsdp"):
        try:
            module = importlib.import_module(path)
        except Exception:  # Debian's 1.13 fsdp fails to import under 3.11
            continue
        if hasattr(module, "fully_shard"):
            return module.fully_shard, getattr(module, "MixedPrecisionPolicy", None)
    raise SpecError(f"FSDP2 (fully_shard) is not in torch {torch.__version__}: the framework's "
                    "FSDP flavour needs torch >= 2.4")


def fully_shard_program(program, setup, mixed):
    """FSDP2 as the framework applies it: fully_shard on each unit (a copy
    of a top-level repeated layer: torchtune's shard_model conditions,
    litgpt's Block), under litgpt's LoRA also on every trainable Linear
    (parallelize_fn), then on the whole model (frameworks.fsdp_flavour has
    the citations)."""
    fully_shard, policy = fully_shard_module()
    kwargs = {}
    if mixed is not None and policy is not None:
        kwargs["mp_policy"] = policy(param_dtype=mixed, reduce_dtype=mixed)
    modules = [m for m in program.modules() if isinstance(m, Unit)]
    if setup.framework == "LITGPT":
        modules += [m for m in program.modules()
                    if isinstance(m, torch.nn.Linear) and m.weight.requires_grad]
    for module in reversed(modules):
        fully_shard(module, **kwargs)
    fully_shard(program, **kwargs)
    return program


class Group:
    """This rank's view of the torch.distributed job."""

    def __init__(self, env, device_flag):
        self.rank, self.world, self.local_rank, self.local_world = env
        if self.local_world == self.world and "MASTER_ADDR" in os.environ:
            # One node: every rank reaches rank 0's store on loopback.
            os.environ["MASTER_ADDR"] = "127.0.0.1"
        import torch.distributed as dist
        self.dist = dist
        if device_flag.type == "cuda":
            # Under the launcher cuda:LOCAL_RANK; a group of one keeps the
            # --device it was given (cuda:N).
            index = device_flag.index if device_flag.index is not None else self.local_rank
            if index >= torch.cuda.device_count():
                raise SpecError(f"cuda:{index} (LOCAL_RANK {self.local_rank}): only "
                                f"{torch.cuda.device_count()} CUDA device(s) are visible "
                                "(CUDA_VISIBLE_DEVICES)")
            self.device = torch.device("cuda", index)
            torch.cuda.set_device(self.device)
            self.backend = "nccl"
        else:
            self.device = torch.device("cpu")
            self.backend = "gloo"
        dist.init_process_group(self.backend)
        # The rendezvous store, through connections of our own: a client
        # serves one request at a time, and rank 0's watcher blocks in a wait
        # while the main thread posts.
        self.store = self._client()
        self.watch_store = self._client() if self.rank == 0 else None
        self.fault = None
        text = os.environ.get(FAULT_ENV, "")
        if re.fullmatch(r"[0-9]{1,4}:[0-9]{1,4}", text):
            rank, step = (int(x) for x in text.split(":"))
            if rank == self.rank:
                self.fault = step

    def _client(self):
        store = self.dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                                   is_master=False,
                                   timeout=datetime.timedelta(seconds=REPORT_WAIT_S))
        return self.dist.PrefixStore("headroom-harness/", store)

    def fault_point(self, step, phase):
        if self.fault is not None and self.fault == step:
            self.fault = None
            raise RuntimeError(f"CUDA out of memory (injected by ${FAULT_ENV} on rank "
                               f"{self.rank} before {phase} of step {step})")

    def wrap(self, program, setup, mixed, device, compile_model=False):
        """The program as the setup's strategy runs it; under FSDP the
        framework's flavour (frameworks.fsdp_flavour). `wrapped` says which
        ran ("ddp", "fsdp1", "fsdp1 use_orig_params", "fsdp2")."""
        cuda = device.type == "cuda"
        if setup.parallel not in FSDP_STRATEGIES:  # DDP (PARALLEL_UNSPECIFIED is DDP)
            from torch.nn.parallel import DistributedDataParallel
            self.wrapped = "ddp"
            return DistributedDataParallel(
                program, device_ids=[device.index] if cuda else None,
                bucket_cap_mb=DDP_BUCKET_CAP_MB, gradient_as_bucket_view=True)
        flavour, orig_params = fsdp_flavour(setup)
        if flavour == "fsdp2":
            self.wrapped = "fsdp2"
            return fully_shard_program(program, setup, mixed)
        fsdp = fsdp_module()
        try:
            from torch.distributed.fsdp.wrap import ModuleWrapPolicy
            policy = ModuleWrapPolicy({Unit})
        except ImportError:  # torch < 2.1
            from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
            policy = functools.partial(transformer_auto_wrap_policy,
                                       transformer_layer_cls={Unit})
        kwargs = {"sharding_strategy": getattr(fsdp.ShardingStrategy,
                                               FSDP_STRATEGIES[setup.parallel]),
                  "auto_wrap_policy": policy,
                  "backward_prefetch": fsdp.BackwardPrefetch.BACKWARD_PRE}
        if mixed is not None:
            kwargs["mixed_precision"] = fsdp.MixedPrecision(
                param_dtype=mixed, reduce_dtype=mixed, buffer_dtype=mixed)
        if setup.offload in ("PARAMS", "BOTH"):
            kwargs["cpu_offload"] = fsdp.CPUOffload(offload_params=True)
        if cuda:
            kwargs["device_id"] = device
        grads = {p.requires_grad for p in program.parameters()}
        if len(grads) > 1 or compile_model or orig_params:
            # Frozen and trainable weights in one unit (LoRA, freeze): one
            # flat parameter cannot mix them unless FSDP keeps the originals;
            # torch.compile needs them too; Fabric sets it always.
            kwargs["use_orig_params"] = True
        self.wrapped = "fsdp1 use_orig_params" if kwargs.get("use_orig_params") else "fsdp1"
        return fsdp.FullyShardedDataParallel(program, **kwargs)

    def watch(self, index):
        """Rank 0: a thread that prints batch `index`'s failure record as
        soon as any rank posts one, and ends the group."""
        thread = threading.Thread(target=self._watch, args=(index,), daemon=True)
        thread.start()
        return thread

    def _watch(self, index):
        key, store = f"b{index}/end", self.watch_store
        for _ in range(MAX_WATCH_WAITS):
            try:
                store.wait([key], datetime.timedelta(seconds=WATCH_WAIT_S))
                break
            except RuntimeError as error:
                if "timeout" not in str(error).lower():
                    return  # the store is gone: the launcher is ending the group
        else:
            return
        if store.get(key).decode() == "ok":
            return
        first = json.loads(store.get(f"b{index}/fail1").decode())
        emit(group_result(first["batch"], [], failed=first))
        store.set(f"b{index}/reported", "1")
        os._exit(EXIT_GROUP_FAILED)

    def ok(self, index):
        self.store.set(f"b{index}/end", "ok")

    def fail(self, index, mine):
        """Posts this rank's failure and ends this process once rank 0 has
        printed (or REPORT_WAIT_S passed); never returns."""
        order = self.store.add(f"b{index}/failures", 1)
        self.store.set(f"b{index}/fail{order}", json.dumps(mine))
        self.store.set(f"b{index}/end", "failed")
        try:
            self.store.wait([f"b{index}/reported"],
                            datetime.timedelta(seconds=REPORT_WAIT_S))
        except RuntimeError:
            pass
        sys.stdout.flush()
        os._exit(EXIT_GROUP_FAILED)

    def gather(self, mine):
        out = [None] * self.world
        self.dist.all_gather_object(out, mine)
        return out

    def close(self):
        self.dist.destroy_process_group()


def _rss_bytes():
    """This process's peak resident set since it started (ru_maxrss, KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


PEAK_SOURCE_CUDA = "torch.cuda.max_memory_allocated"
PEAK_SOURCE_CPU = ("cpu run: no allocator peak; counted bytes of parameters, gradients "
                   "(DDP buckets) and optimizer state after a step, activations excluded")


def run_batches_distributed(spec, setup, group, batches, warmup, steps, compile_model=False):
    """run_batches under torch.distributed: every rank runs each batch on its
    own microbatch of `batch` samples; rank 0 prints one result per batch."""
    device = group.device
    cuda = device.type == "cuda"
    nvml = open_nvml(device)
    unsupported = parallel_unsupported(setup)
    for index, batch in enumerate(batches):
        emit({"event": "batch_start", "batch": batch})
        try:
            impl = optimizer_impl(setup, device)
        except SpecError:
            impl = None
        if unsupported is not None:  # the same on every rank: nobody runs
            emit(unsupported_result(batch, unsupported, impl, group.world))
            continue
        watcher = group.watch(index) if group.rank == 0 else None
        record = Measurement()
        record.count_states = not cuda
        record.unmeasured_phases = unmeasured_phases(setup)
        # Per phase on this rank's GPU; no context figure (the group's
        # NCCL set-up created the context before any baseline was read).
        meter = PhaseMeter(CudaStats(device, nvml)) if cuda else None
        # This rank's failure is the batch's result.
        oom, error = batch_outcome(
            lambda: measure_batch(spec, setup, device, batch, warmup, steps,
                                   record, compile_model, nvml, group, meter),
            prefix=f"rank {group.rank}: ")
        gc.collect()
        peak, reserved = (cuda_peaks(device, meter) if cuda
                          else (record.counted_bytes, None))
        ok = not oom and not error
        mine = {"rank": group.rank, "batch": batch, "world_size": group.world, "oom": oom,
                "error": error, "optimizer": impl, "peak_bytes": peak,
                "reserved_bytes": reserved, "rss_bytes": _rss_bytes(), "steps": record.steps,
                "step_seconds": mean_step_seconds(record, ok),
                "energy_j": record.energy_j() if ok else None,
                "peak_source": PEAK_SOURCE_CUDA if cuda else PEAK_SOURCE_CPU,
                "phases": meter.phases if meter is not None else None,
                "unmeasured_phases": record.unmeasured_phases,
                "framework": record.framework, "load": record.load,
                "emulated": record.emulated, "fsdp": record.fsdp,
                "offloaded_bytes": record.offloaded_bytes}
        if not ok:
            group.fail(index, mine)  # does not return
        ranks = group.gather(mine)
        if group.rank == 0:
            group.ok(index)
            watcher.join()
            emit(group_result(batch, ranks))
