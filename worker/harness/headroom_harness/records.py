"""What the harness prints, one JSON object per line on stdout
(worker/harness/README.md, "Output of run"), and the record of one batch's
run behind each result line. No torch here: the lines' shapes are tested
without it."""

import json

from headroom_harness.memory import largest_phases

# Under torch.distributed only rank 0 prints (main sets this False on the
# other ranks), so the worker reads one line per event.
EMITS = [True]


def emit(obj):
    """Prints one line (on rank 0 only under torch.distributed)."""
    if EMITS[0]:
        print(json.dumps(obj), flush=True)


def mean_step_seconds(record, ok):
    """The mean timed step of a batch that succeeded; None otherwise."""
    return sum(record.seconds) / len(record.seconds) if ok and record.seconds else None


class Measurement:
    """What one batch's run has seen so far (kept when it fails midway)."""

    def __init__(self):
        self.steps = 0
        self.seconds = []
        # Under torch.distributed on the CPU (no allocator peak): the largest
        # counted bytes of model states after an optimizer step, or None.
        self.count_states = False
        self.counted_bytes = None
        # NVML total-energy counter (mJ) at the start of the first timed step
        # and after the last one; None without NVML.
        self.energy_start_mj = None
        self.energy_end_mj = None
        # On a GPU: the CUDA context (NVML's used bytes it added before the
        # model was built), each measured phase's figures (memory.py's
        # PhaseMeter rows) and the phases asked for but not measured.
        self.device_context_bytes = None
        self.phases = []
        self.unmeasured_phases = []
        # Issue 31: the framework profile whose path ran (frameworks.py),
        # how it loaded the weights, and the library layers run in plain
        # PyTorch because the library does not import ("emulated").
        self.framework = None
        self.load = None
        self.emulated = []
        # Under torch.distributed: how the model was wrapped ("ddp",
        # "fsdp1", "fsdp1 use_orig_params", "fsdp2").
        self.fsdp = None
        # activation_offloading: the most bytes of saved activations one
        # forward moved to host memory (None when off).
        self.offloaded_bytes = None

    def energy_j(self):
        if self.energy_start_mj is None or self.energy_end_mj is None:
            return None
        return (self.energy_end_mj - self.energy_start_mj) / 1000.0


def batch_result(batch, oom, error, peak_allocated, peak_reserved, record, optimizer):
    """A one-process run's result line for one batch: the allocator's peaks
    (None on the CPU), the record's timing and energy when the batch
    succeeded, what implemented the optimizer (None when nothing could),
    the CUDA context and the phases measured (those finished before a
    failure)."""
    ok = not oom and not error
    return {"event": "result", "batch": batch, "oom": oom,
            "peak_allocated_bytes": peak_allocated,
            "peak_reserved_bytes": peak_reserved,
            "step_seconds": mean_step_seconds(record, ok),
            "steps": record.steps,
            "energy_j": record.energy_j() if ok else None,
            "error": error, "optimizer": optimizer,
            "device_context_bytes": record.device_context_bytes,
            "phases": list(record.phases),
            "unmeasured_phases": list(record.unmeasured_phases),
            **profile_fields(record)}


def profile_fields(record):
    """The result's framework, load and emulated fields (issue 31); a
    Measurement or a rank's dict."""
    get = record.get if isinstance(record, dict) else lambda k, d=None: getattr(record, k, d)
    out = {"framework": get("framework"), "load": get("load"),
           "emulated": list(get("emulated") or [])}
    if get("fsdp") is not None:
        out["wrapped"] = get("fsdp")
    if get("offloaded_bytes") is not None:
        out["offloaded_bytes"] = get("offloaded_bytes")
    return out


def unsupported_result(batch, error, optimizer, world_size):
    """A group's result line for a batch nobody ran: the failure record of a
    parallel setup the harness does not run."""
    return {"event": "result", "batch": batch, "oom": False,
            "peak_allocated_bytes": None, "peak_reserved_bytes": None,
            "step_seconds": None, "steps": 0, "energy_j": None,
            "error": error, "optimizer": optimizer, "world_size": world_size,
            "rank_peaks_gb": None, "host_peak_gb": None}


def group_result(batch, ranks, failed=None):
    """Rank 0's result line: every rank's figures, or the first failure."""
    if failed is not None:
        return {"event": "result", "batch": batch, "oom": failed["oom"],
                "peak_allocated_bytes": failed["peak_bytes"], "peak_reserved_bytes": None,
                "step_seconds": None, "steps": failed["steps"], "energy_j": None,
                "error": failed["error"], "optimizer": failed["optimizer"],
                "world_size": failed["world_size"], "failed_rank": failed["rank"],
                "rank_peaks_gb": None, "host_peak_gb": None,
                "peak_source": failed["peak_source"]}
    peaks = [r["peak_bytes"] for r in ranks]
    have_peaks = all(p is not None for p in peaks)
    seconds = [r["step_seconds"] for r in ranks]
    energies = [r["energy_j"] for r in ranks]
    return {"event": "result", "batch": batch, "oom": False,
            "peak_allocated_bytes": max(peaks) if have_peaks else None,
            "peak_reserved_bytes": (max(r["reserved_bytes"] for r in ranks)
                                    if all(r["reserved_bytes"] is not None for r in ranks)
                                    else None),
            # The slowest rank's mean (the collectives keep them in step).
            "step_seconds": max(seconds) if all(x is not None for x in seconds) else None,
            "steps": min(r["steps"] for r in ranks),
            "energy_j": sum(energies) if all(e is not None for e in energies) else None,
            "error": "", "optimizer": ranks[0]["optimizer"], "world_size": len(ranks),
            "rank_peaks_gb": [p / 1e9 for p in peaks] if have_peaks else None,
            "peak_allocated_gb": max(peaks) / 1e9 if have_peaks else None,
            "host_peak_gb": sum(r["rss_bytes"] for r in ranks) / 1e9,
            "peak_source": ranks[0]["peak_source"],
            "device_context_bytes": _largest(r.get("device_context_bytes") for r in ranks),
            "phases": largest_phases([r.get("phases") for r in ranks]) or [],
            "unmeasured_phases": ranks[0].get("unmeasured_phases", []),
            **profile_fields(ranks[0])}


def _largest(values):
    values = list(values)
    return max(values) if values and all(v is not None for v in values) else None
