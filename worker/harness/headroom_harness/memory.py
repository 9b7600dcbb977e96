"""Memory as the device holds it, per phase of one batch's run: the
allocator's peak (max_memory_allocated), its reserved peak
(max_memory_reserved) and NVML's used memory less the process's baseline,
and the CUDA context measured before the model loads. No torch here: the
meter reads its figures through a small `stats` object (CudaStats in
phases.py on a GPU, a fake in the tests)."""

import os

# TrainingSetup.phases (enum JobPhase) -> the phase's name in the result
# line and in PhaseMeasurement.phase (calibration.proto).
PHASE_NAMES = {"LOAD": "load", "FIRST_STEP": "first-step", "STEP": "step",
               "EVAL": "eval", "GENERATE": "generate", "SAVE": "save"}
# The phases every run has (the proto's default for an empty list) and
# those the harness measures; GENERATE needs a KV cache the harness's
# Program does not build, so it is named in the result as not measured.
DEFAULT_PHASES = ("LOAD", "STEP")
MEASURED_PHASES = ("load", "first-step", "step", "eval", "save")

ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"


def setup_phases(setup):
    """The phase names a setup asks for (its JobPhase list, or load + step):
    load, first-step and step always run, the others when asked."""
    return {PHASE_NAMES[p] for p in (setup.phases or DEFAULT_PHASES)}


def alloc_conf(current, expandable):
    """PYTORCH_CUDA_ALLOC_CONF for the setup: `current`'s other options kept,
    expandable_segments:True when the setup asks for it and removed when it
    does not (so the measurement is of the setup it names)."""
    options = [o for o in (current or "").split(",")
               if o.strip() and o.split(":")[0].strip() != "expandable_segments"]
    if expandable:
        options.append("expandable_segments:True")
    return ",".join(options)


def apply_alloc_conf(expandable, environ=None):
    """Sets the caching allocator's options in this process's environment;
    must run before torch initialises CUDA (the allocator reads it once)."""
    environ = os.environ if environ is None else environ
    value = alloc_conf(environ.get(ALLOC_CONF), expandable)
    if value:
        environ[ALLOC_CONF] = value
    else:
        environ.pop(ALLOC_CONF, None)


class PhaseMeter:
    """The phases of one batch's run on one device. Between phases the
    allocator's peak stats are reset, so each phase has its own peaks; the
    batch's overall peaks (peaks()) stay the largest over the whole run,
    the stretches between phases (later warm-up steps) included.

    `stats` has synchronize(), peaks() -> (allocated, reserved bytes),
    reset() and device_used_bytes() -> NVML's used bytes or None.
    `baseline_bytes`: NVML's used bytes before this process had a CUDA
    context (None: device figures are not reported)."""

    def __init__(self, stats, baseline_bytes=None):
        self._stats = stats
        self._baseline = baseline_bytes
        self._open = None
        self._allocated = 0
        self._reserved = 0
        self.phases = []

    def _fold(self):
        allocated, reserved = self._stats.peaks()
        self._allocated = max(self._allocated, allocated)
        self._reserved = max(self._reserved, reserved)
        return allocated, reserved

    def device_bytes(self):
        """NVML's used bytes now less the baseline, or None."""
        if self._baseline is None:
            return None
        used = self._stats.device_used_bytes()
        return None if used is None else max(used - self._baseline, 0)

    def start(self, phase):
        """Opens `phase` (one of MEASURED_PHASES): the peaks so far are kept
        for peaks(), then the allocator's peak stats are reset."""
        if phase not in MEASURED_PHASES:
            raise ValueError(f"phase {phase} is not one of {', '.join(MEASURED_PHASES)}")
        self._stats.synchronize()
        self._fold()
        self._stats.reset()
        self._open = phase

    def end(self):
        """Closes the open phase and records its figures. NVML's used memory
        is read at the phase's end: the caching allocator keeps the segments
        it reserved during the phase (nothing is given back before
        empty_cache), so what the device holds at the end is the phase's
        device peak."""
        if self._open is None:
            return
        self._stats.synchronize()
        allocated, reserved = self._fold()
        self.phases.append({"phase": self._open, "peak_allocated_bytes": allocated,
                            "peak_reserved_bytes": reserved,
                            "device_bytes": self.device_bytes()})
        self._open = None

    def peaks(self):
        """The batch's (allocated, reserved) peaks over every phase and the
        stretches between them, the open phase included (an OOM inside it)."""
        self._stats.synchronize()
        self._fold()
        return self._allocated, self._reserved


def largest_phases(per_rank):
    """A group's phases: per phase name, each figure the largest rank's (the
    fullest GPU decides), in the first rank's order; None where a rank has
    none."""
    if not per_rank or any(p is None for p in per_rank):
        return None
    out = []
    for first in per_rank[0]:
        name = first["phase"]
        same = [p for phases in per_rank for p in phases if p["phase"] == name]
        row = {"phase": name}
        for key in ("peak_allocated_bytes", "peak_reserved_bytes", "device_bytes"):
            values = [p[key] for p in same]
            row[key] = max(values) if all(v is not None for v in values) else None
        out.append(row)
    return out
