"""Measuring one batch: a fresh model and optimizer, warm-up and timed
training steps (forward, loss, backward, optimizer step), an evaluation and
a save where the setup asks for them, the allocator's peaks and the
device's memory per phase (memory.py), the timed steps' energy;
run_batches prints a result line per batch."""

import contextlib
import gc
import io
import time

import torch

from headroom_harness import frameworks
from headroom_harness.energy import open_nvml
from headroom_harness.errors import SpecError
from headroom_harness.memory import PHASE_NAMES, MEASURED_PHASES, PhaseMeter, setup_phases
from headroom_harness.optimizers import InBackward, make_optimizer, optimizer_impl
from headroom_harness.records import Measurement, batch_result, emit
from headroom_harness.setups import FSDP_STRATEGIES
from headroom_harness.torch_support import (HAS_SDPA, autocast_enabled, compile_unavailable,
                                            grad_scaler, is_oom)


def batch_outcome(measure, prefix=""):
    """Runs one batch's measurement: (oom, error). A failure is the batch's
    result, never a crash; `prefix` starts any error but an OOM."""
    try:
        measure()
    except Exception as e:
        oom = is_oom(e)
        return oom, "" if oom else f"{prefix}{type(e).__name__}: {e}"
    return False, ""


def cuda_peaks(device, meter=None):
    """After a batch: the allocator's peaks (allocated, reserved bytes), over
    every phase when a meter reset them between phases; its cache is
    emptied for the next batch."""
    torch.cuda.synchronize(device)
    if meter is not None:
        peaks = meter.peaks()
    else:
        peaks = (torch.cuda.max_memory_allocated(device),
                 torch.cuda.max_memory_reserved(device))
    torch.cuda.empty_cache()
    return peaks


class CudaStats:
    """PhaseMeter's figures on a CUDA device: the caching allocator's peak
    stats and NVML's used memory (None without NVML)."""

    def __init__(self, device, nvml):
        self._device = device
        self._nvml = nvml

    def synchronize(self):
        torch.cuda.synchronize(self._device)

    def peaks(self):
        return (torch.cuda.max_memory_allocated(self._device),
                torch.cuda.max_memory_reserved(self._device))

    def reset(self):
        torch.cuda.reset_peak_memory_stats(self._device)

    def device_used_bytes(self):
        return None if self._nvml is None else self._nvml.used_bytes()


class NoMeter:
    """A run without phase figures (the CPU)."""
    phases = []

    def start(self, phase):
        pass

    def end(self):
        pass


def cuda_context(device, nvml):
    """(baseline, context bytes): NVML's used memory on the device before
    this process created its CUDA context there, and what creating the
    context added (the CUDA runtime, its modules and handles), before any
    model is built. NVML's figure is the device's, every process's: another
    job starting meanwhile would be counted. (None, None) without NVML, or
    where this process already holds a context (no baseline to read)."""
    if nvml is None:
        return None, None
    has_context = getattr(torch._C, "_cuda_hasPrimaryContext", None)
    if has_context is None or has_context(device.index or 0):
        return None, None
    baseline = nvml.used_bytes()
    torch.cuda.synchronize(device)  # creates the primary context
    return baseline, max(nvml.used_bytes() - baseline, 0)


def unmeasured_phases(setup):
    """The phases the setup asks for that the harness does not measure
    (generate: the Program builds no KV cache), in JobPhase order."""
    asked = setup_phases(setup)
    return [name for name in PHASE_NAMES.values()
            if name in asked and name not in MEASURED_PHASES]


def _check_runnable(setup, device, batch, compile_model):
    """SpecError (the batch's failure record) when this torch or device
    cannot run the batch as the setup says: torch.compile, the attention
    kernel, grad_accum microbatches, the optimizer."""
    if compile_model:
        why = compile_unavailable()
        if why is not None:
            raise SpecError(why)
    if setup.attention in ("SDPA", "FLASH") and not HAS_SDPA:
        raise SpecError(f"setup.attention = {setup.attention} needs torch >= 2.0 "
                        f"(scaled_dot_product_attention), found {torch.__version__}")
    if setup.attention == "FLASH" and device.type != "cuda":
        raise SpecError("setup.attention = FLASH runs on CUDA only")
    accum = max(setup.grad_accum, 1)
    if batch % accum:
        raise SpecError(f"batch {batch} is not divisible by setup.grad_accum = {accum}")
    optimizer_impl(setup, device)


def measure_batch(spec, setup, device, batch, warmup, steps, record,
                   compile_model=False, nvml=None, group=None, meter=None):
    """Builds a fresh model and optimizer and runs warmup + steps training
    steps as the setup says (precision, optimizer, adapters, freeze,
    grad_accum microbatches, the forward through torch.compile when
    compile_model; under a torch.distributed group, the model wrapped as the
    setup's parallel strategy says, on this rank's own microbatches), then
    the evaluation and the save its phases ask for; raises on OOM or any
    other failure. `meter` (a PhaseMeter) records each phase: load (built,
    moved, quantised, wrapped), first-step (step 0: the optimizer's state is
    created), step (from step max(warmup, 1) on: the steady steps), eval,
    save."""
    cuda = device.type == "cuda"
    _check_runnable(setup, device, batch, compile_model)
    accum = max(setup.grad_accum, 1)
    meter = meter if meter is not None else NoMeter()
    if cuda:
        # Reset before building, so an OOM while building has its own peak.
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    meter.start("load")
    quantize = setup.quant_base != "BASE_QUANT_UNSPECIFIED"
    fsdp = group is not None and setup.parallel in FSDP_STRATEGIES
    if group is not None:
        torch.manual_seed(0)  # every rank builds the same model
    # FSDP CPU offload: built on the host, each unit moved to the GPU,
    # sharded and offloaded in turn by FSDP (as offload runs are launched).
    offload_params = fsdp and setup.offload in ("PARAMS", "BOTH")
    loaded = frameworks.load(spec, setup, device, fsdp_units=fsdp, host_build=offload_params)
    program = loaded.program
    record.framework = frameworks.framework_profile(setup)
    record.emulated = list(loaded.emulated)
    record.load = loaded.load
    positions = setup.positions or spec.positions
    chunks = frameworks.loss_chunks(setup, positions)
    if chunks:
        program.set_chunked_loss("litgpt" if setup.framework == "LITGPT" else "torchtune",
                                 _chunk_size(positions, chunks) if setup.framework == "LITGPT"
                                 else chunks)
    true_half = {"BF16_TRUE": torch.bfloat16, "FP16_TRUE": torch.float16}.get(setup.precision)
    program.train()
    mixed = {"BF16_MIXED": torch.bfloat16, "FP16_MIXED": torch.float16}.get(setup.precision)
    if quantize and mixed is None and true_half is None:
        mixed = torch.bfloat16  # QLoRA computes in bf16
    model = program
    if group is not None:
        model = group.wrap(program, setup, mixed, device, compile_model)
        record.fsdp = getattr(group, "wrapped", None)
        torch.manual_seed(1000 + group.rank)  # each rank its own microbatches
    trainable = [p for p in model.parameters() if p.requires_grad]
    if not trainable:
        raise SpecError("the spec has no trainable parameters (every layer is frozen)")
    if setup.optimizer_in_backward:
        optimizer = InBackward(setup.optimizer, trainable)
    else:
        optimizer = make_optimizer(setup.optimizer, trainable, setup.offload)
    forward = torch.compile(model) if compile_model else model
    meter.end()
    scaler = None
    if mixed is torch.float16 and cuda:
        if fsdp:
            from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
            scaler = ShardedGradScaler()
        else:
            scaler = grad_scaler()
    # DDP all-reduces the gradients of the last microbatch only (no_sync
    # before it: the gradients stay resident, as the planner counts).
    ddp = group is not None and not fsdp
    micro = batch // accum
    steady = max(warmup, 1)
    for step in range(warmup + steps):
        if step in (0, steady):
            meter.start("first-step" if step == 0 else "step")
        if cuda:
            torch.cuda.synchronize(device)
        if nvml is not None and step == warmup:
            # The counter over the timed steps only, read after a synchronize.
            record.energy_start_mj = nvml.energy_mj()
        start = time.perf_counter()
        for i in range(accum):
            data = program.make_batch(micro, device)
            # fp32 runs outside autocast (torch 1.13 rejects a disabled one).
            context = (torch.autocast(device_type=device.type, dtype=mixed) if mixed
                       else contextlib.nullcontext())
            sync = (model.no_sync() if ddp and i < accum - 1 else contextlib.nullcontext())
            with sync:
                with context:
                    if mixed is not None and not autocast_enabled(device.type):
                        raise SpecError(f"setup.precision = {setup.precision} is not "
                                        f"supported on cpu by torch {torch.__version__}")
                    loss = forward(data)
                if program.offloader is not None:
                    record.offloaded_bytes = max(record.offloaded_bytes or 0,
                                                 program.offloader.offloaded_bytes)
                if not loss.requires_grad:
                    raise SpecError("no trainable layer reaches the loss")
                if group is not None:
                    group.fault_point(step, "backward")
                if accum > 1:
                    loss = loss / accum
                if scaler is not None:
                    scaler.scale(loss).backward()
                else:
                    loss.backward()
            del loss, data
        if scaler is not None:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        if record.count_states:
            counted = _state_bytes(model, optimizer)
            record.counted_bytes = max(record.counted_bytes or 0, counted)
        optimizer.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize(device)
        if step >= warmup:
            record.seconds.append(time.perf_counter() - start)
            record.steps += 1
            if nvml is not None:
                record.energy_end_mj = nvml.energy_mj()
        if step == 0 or step == warmup + steps - 1:
            meter.end()
    phases = setup_phases(setup)
    if "eval" in phases:
        meter.start("eval")
        _evaluate(program, model, forward, setup.eval_batch or micro, device, mixed)
        meter.end()
    if "save" in phases:
        meter.start("save")
        # FSDP2 (fully_shard) has no FSDP1 state_dict_type: each rank's
        # sharded state dict, as it comes.
        _save(model, fsdp and record.fsdp != "fsdp2")
        meter.end()


def _chunk_size(positions, chunks):
    """litgpt's chunk size (lm_head_chunk_size) for `chunks` pieces of a
    sequence of `positions`."""
    return max(1, -(-positions // chunks))


def _evaluate(program, model, forward, batch, device, mixed):
    """An evaluation pass: model.eval() (the wrapper, when there is one),
    a forward at `batch` of the program's inputs under torch.no_grad() (no
    activations kept for a backward), model.train()."""
    model.eval()
    try:
        context = (torch.autocast(device_type=device.type, dtype=mixed) if mixed
                   else contextlib.nullcontext())
        with torch.no_grad(), context:
            loss = forward(program.make_batch(batch, device))
        del loss
    finally:
        model.train()


def _save(model, fsdp):
    """A save: the full state dict gathered (under FSDP on rank 0 only, on
    the GPU, as FULL_STATE_DICT with rank0_only) and torch.save'd into an
    in-memory buffer, which is then dropped."""
    if fsdp:
        from torch.distributed.fsdp import (FullStateDictConfig, StateDictType,
                                            FullyShardedDataParallel)
        config = FullStateDictConfig(offload_to_cpu=False, rank0_only=True)
        with FullyShardedDataParallel.state_dict_type(model, StateDictType.FULL_STATE_DICT,
                                                      config):
            state = model.state_dict()
    else:
        state = model.state_dict()
    buffer = io.BytesIO()
    torch.save(state, buffer)
    del state, buffer


def _storage(t):
    return t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()


def _state_bytes(model, optimizer):
    """Bytes of the model states a rank holds after an optimizer step:
    parameters, gradients (DDP's buckets, which they view with
    gradient_as_bucket_view) and optimizer state, each storage once. The
    CPU's stand-in for an allocator peak (activations not included)."""
    seen, total = set(), 0

    def add(t):
        nonlocal total
        if not torch.is_tensor(t) or t.device.type == "meta":
            return
        storage = _storage(t)
        key = (storage.data_ptr(), storage.nbytes())
        if storage.data_ptr() == 0 or key in seen:
            return
        seen.add(key)
        total += storage.nbytes()

    for p in model.parameters():
        add(p)
        add(p.grad)
    for state in getattr(optimizer, "state", {}).values():
        for value in state.values():
            add(value)
    return total


def run_batches(spec, setup, device, batches, warmup, steps, compile_model=False):
    """One process on one device: per batch a batch_start and a result line;
    a failed batch (an OOM included) is its result, and the next one runs."""
    cuda = device.type == "cuda"
    nvml = open_nvml(device)
    # The worker runs one batch per process: the context is measured once,
    # before the first model is built, and is every batch's.
    baseline, context = cuda_context(device, nvml) if cuda else (None, None)
    for batch in batches:
        emit({"event": "batch_start", "batch": batch})
        record = Measurement()
        record.device_context_bytes = context
        record.unmeasured_phases = unmeasured_phases(setup)
        meter = PhaseMeter(CudaStats(device, nvml), baseline) if cuda else None
        try:
            impl = optimizer_impl(setup, device)
        except SpecError:
            impl = None
        oom, error = batch_outcome(
            lambda: measure_batch(spec, setup, device, batch, warmup, steps,
                                   record, compile_model, nvml, meter=meter))
        # The failed frames are gone once the measurement returned; now the
        # allocator can really give their memory back.
        gc.collect()
        peak_allocated, peak_reserved = (cuda_peaks(device, meter) if cuda
                                         else (None, None))
        if meter is not None:
            record.phases = meter.phases
        emit(batch_result(batch, oom, error, peak_allocated, peak_reserved, record, impl))
