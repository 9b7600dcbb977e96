"""Measuring one batch: a fresh model and optimizer, warm-up and timed
training steps (forward, loss, backward, optimizer step), the allocator's
peaks, the timed steps' energy; run_batches prints a result line per batch."""

import contextlib
import gc
import time

import torch

from headroom_harness.energy import open_nvml
from headroom_harness.errors import SpecError
from headroom_harness.optimizers import InBackward, make_optimizer, optimizer_impl
from headroom_harness.program import Program
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


def cuda_peaks(device):
    """After a batch: the allocator's peaks (allocated, reserved bytes); its
    cache is emptied for the next batch."""
    torch.cuda.synchronize(device)
    peaks = (torch.cuda.max_memory_allocated(device),
             torch.cuda.max_memory_reserved(device))
    torch.cuda.empty_cache()
    return peaks


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
                   compile_model=False, nvml=None, group=None):
    """Builds a fresh model and optimizer and runs warmup + steps training
    steps as the setup says (precision, optimizer, adapters, freeze,
    grad_accum microbatches, the forward through torch.compile when
    compile_model; under a torch.distributed group, the model wrapped as the
    setup's parallel strategy says, on this rank's own microbatches); raises
    on OOM or any other failure."""
    cuda = device.type == "cuda"
    _check_runnable(setup, device, batch, compile_model)
    accum = max(setup.grad_accum, 1)
    if cuda:
        # Reset before building, so an OOM while building has its own peak.
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    quantize = setup.quant_base != "BASE_QUANT_UNSPECIFIED"
    fsdp = group is not None and setup.parallel in FSDP_STRATEGIES
    if group is not None:
        torch.manual_seed(0)  # every rank builds the same model
    # FSDP CPU offload: built on the host, each unit moved to the GPU,
    # sharded and offloaded in turn by FSDP (as offload runs are launched).
    offload_params = fsdp and setup.offload in ("PARAMS", "BOTH")
    program = Program(spec, setup, torch.device("cpu") if offload_params else device,
                      quantize=quantize, fsdp_units=fsdp)
    true_half = {"BF16_TRUE": torch.bfloat16, "FP16_TRUE": torch.float16}.get(setup.precision)
    if true_half is not None:
        program.to_true_half(true_half)
    program.train()
    mixed = {"BF16_MIXED": torch.bfloat16, "FP16_MIXED": torch.float16}.get(setup.precision)
    if quantize and mixed is None and true_half is None:
        mixed = torch.bfloat16  # QLoRA computes in bf16
    model = program
    if group is not None:
        model = group.wrap(program, setup, mixed, device, compile_model)
        torch.manual_seed(1000 + group.rank)  # each rank its own microbatches
    trainable = [p for p in model.parameters() if p.requires_grad]
    if not trainable:
        raise SpecError("the spec has no trainable parameters (every layer is frozen)")
    if setup.optimizer_in_backward:
        optimizer = InBackward(setup.optimizer, trainable)
    else:
        optimizer = make_optimizer(setup.optimizer, trainable)
    forward = torch.compile(model) if compile_model else model
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
    for step in range(warmup + steps):
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
    for batch in batches:
        emit({"event": "batch_start", "batch": batch})
        record = Measurement()
        try:
            impl = optimizer_impl(setup, device)
        except SpecError:
            impl = None
        oom, error = batch_outcome(
            lambda: measure_batch(spec, setup, device, batch, warmup, steps,
                                   record, compile_model, nvml))
        # The failed frames are gone once the measurement returned; now the
        # allocator can really give their memory back.
        gc.collect()
        peak_allocated, peak_reserved = (cuda_peaks(device) if cuda
                                         else (None, None))
        emit(batch_result(batch, oom, error, peak_allocated, peak_reserved, record, impl))
