"""The CheckFit answer as plain dataclasses, so callers never handle
generated messages; other answers are dicts in the protobuf JSON mapping
with the proto's field names (to_dict)."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

from google.protobuf import json_format

from headroom.v1 import model_pb2, planner_pb2

@dataclass(frozen=True)
class Basis:
    """What an estimate rests on. kind "ANCHORED": corrected by `runs`
    measured runs of this model and setup (batches min_batch..max_batch on
    `gpus`); "PRIOR": the global factors only, `why` says why."""

    kind: str
    model_key: str
    source: str
    runs: int
    oom_runs: int
    min_batch: int
    max_batch: int
    gpus: list[str]
    extrapolation: float
    why: str


@dataclass(frozen=True)
class Estimate:
    """One batch: predicted peak and its upper bound (peak * k), in GB =
    10^9 bytes, at the step's peak moment ("backward start" or "optimizer
    update"), with that moment's factored components."""

    batch: int
    peak_gb: float
    upper_gb: float
    k: float
    moment: str
    components_gb: dict[str, float]
    basis: Basis
    # The phase whose allocator peak peak_gb is ("step" unless another of
    # the setup's phases is larger; "" from a planner without phases).
    phase: str = ""


@dataclass(frozen=True)
class MemoryFigures:
    """One figure three ways, GB, each with its upper bound: the allocator's
    peak (torch max_memory_allocated), the caching allocator's reserved peak
    (max_memory_reserved), and what the device holds (reserved plus the CUDA
    context, workspaces and NCCL: what nvidia-smi shows). Verdicts compare
    device_upper_gb x headroom with the card."""

    allocated_gb: float
    allocated_upper_gb: float
    reserved_gb: float
    reserved_upper_gb: float
    device_gb: float
    device_upper_gb: float


@dataclass(frozen=True)
class PhaseFigures:
    """One phase of the job ("load", "first-step", "step", "eval",
    "generate", "save"), its three figures, and what it holds in words."""

    phase: str
    figures: MemoryFigures
    holds: str


@dataclass(frozen=True)
class BatchFigures:
    """The answer at one batch on one card: the job's largest phase three
    ways (`phase` decides the verdict), and every phase."""

    batch: int
    figures: MemoryFigures
    phase: str
    phases: list[PhaseFigures]


@dataclass(frozen=True)
class DeviceCosts:
    """What turns allocated bytes into the device's on one card: reserved =
    allocated * reserved_ratio; device = reserved + context_gb + nccl_gb.
    The *_basis fields say where each came from."""

    reserved_ratio: float
    context_gb: float
    nccl_gb: float
    reserved_basis: str
    context_basis: str
    nccl_basis: str


@dataclass(frozen=True)
class KindBound:
    """The setup's kind ("1gpu/qlora", "multi/fsdp-full/lora") and the k of
    its upper bounds per figure, from `measurements` held-out measurements.
    widest: too few of its own, k is the widest of all kinds; untested: no
    measurement of the kind, so no answer on it is FITS."""

    kind: str
    k_allocated: float
    k_reserved: float
    k_device: float
    measurements: int
    widest: bool
    untested: bool
    note: str


@dataclass(frozen=True)
class TargetAnswer:
    """One card. verdicts and peaks_gb are keyed by requested batch; a
    verdict is "FITS" (safe to place), "BORDERLINE" (may OOM) or
    "DOES_NOT_FIT". max_batch_fits is 0 when even batch 1 is not FITS."""

    name: str
    memory_gb: float
    verdicts: dict[int, str]
    peaks_gb: dict[int, float]
    max_batch_fits: int
    max_batch_not_does_not_fit: int
    regime: str
    # Keyed by requested batch: the three figures and every phase (empty
    # from a planner without device figures). device: this card's costs
    # (None without them).
    figures: dict[int, BatchFigures] = field(default_factory=dict)
    device: DeviceCosts | None = None
    # k of this card's upper bound (of the first batch) and the GB added
    # on it to anchored peaks.
    k: float = 0.0
    gpu_constant_gb: float = 0.0

    def device_gb(self, batch: int) -> float:
        """What the device holds at `batch` (the largest phase), GB; the
        allocator's peak from a planner without device figures."""
        answer = self.figures.get(batch)
        return answer.figures.device_gb if answer else self.peaks_gb[batch]


@dataclass(frozen=True)
class MinGpusStrategy:
    """One strategy's smallest GPU count on one card (gpus='auto') and its
    per-GPU breakdown at that count, GB. gpus_fits: the smallest count
    whose verdict at the first batch per GPU is FITS (0: none in 1..512);
    gpus_not_does_not_fit: the smallest that is not DOES_NOT_FIT. gpus and
    nodes: the count the figures are at (gpus_fits, else the other).
    device_gb / device_upper_gb: what the device holds there, and what the
    counts are chosen on."""

    strategy: str
    gpus_fits: int
    gpus_not_does_not_fit: int
    gpus: int
    nodes: int
    peak_gb: float
    upper_gb: float
    sharded_states_gb: float
    gathered_units_gb: float
    buffers_gb: float
    activations_gb: float
    host_gb_per_node: float
    collective_gb: float
    collective_fitted: bool
    device_gb: float
    device_upper_gb: float


@dataclass(frozen=True)
class MinGpusTarget:
    """The smallest counts on one card, per strategy (the setup's parallel,
    or every strategy when it is unset). cheapest: the strategy with the
    fewest GPUs that FITS, then the least per-GPU peak ("" when none fits
    in 1..512)."""

    target: str
    memory_gb: float
    strategies: list[MinGpusStrategy]
    cheapest: str


@dataclass(frozen=True)
class JobDerivation:
    """What a job file said (check_fit(job=...)): its kind ("LITGPT",
    "TORCHTUNE", ...), the model it names and the catalog entry it resolved
    to, the setup (a dict in the protobuf JSON mapping) and the batch per
    GPU, and one line per key read, default taken, field overridden and key
    ignored."""

    kind: str
    model_id: str
    model: str
    setup: dict
    batch: int
    micro_batch: int
    from_file: list[str]
    defaults: list[str]
    overridden: list[str]
    ignored: list[str]


@dataclass(frozen=True)
class FitAnswer:
    """A CheckFit answer: estimates in request batch order, targets in
    request target order."""

    model: str
    params: int
    factor_set_version: str
    headroom: float
    coverage: float
    k: float
    estimates: list[Estimate] = field(default_factory=list)
    targets: list[TargetAnswer] = field(default_factory=list)
    learning: str = ""
    assumptions: list[str] = field(default_factory=list)
    # The setup's kind and the k its bounds use (None from a planner without
    # per-kind bounds).
    bound: KindBound | None = None
    # The framework profile the answer used ("generic", "litgpt 0.5.10") and
    # its resolved plan, one line per decision with its source.
    framework: str = ""
    plan: list[str] = field(default_factory=list)
    # With gpus='auto': per target, in request order.
    min_gpus: list[MinGpusTarget] = field(default_factory=list)
    # With job=...: what the files said (None without).
    job: JobDerivation | None = None


# protobuf 26 renamed the option (Debian 12's 4.21 has the old name).
_EVERY_FIELD = ("always_print_fields_with_no_presence"
                if "always_print_fields_with_no_presence"
                in inspect.signature(json_format.MessageToDict).parameters
                else "including_default_value_fields")


def to_dict(message) -> dict:
    """A message in the protobuf JSON mapping with the proto's field names,
    every field present (defaults included)."""
    return json_format.MessageToDict(message, preserving_proto_field_name=True,
                                     **{_EVERY_FIELD: True})


def _fields(cls, message):
    """cls built from the message's fields of the same names."""
    return cls(**{f: getattr(message, f) for f in cls.__dataclass_fields__})


def fit_answer(response: planner_pb2.CheckFitResponse,
               batches: list[int]) -> FitAnswer:
    """The CheckFit answer; `batches` as requested (verdicts and figures
    are keyed by them)."""
    def basis(b: planner_pb2.Basis) -> Basis:
        return Basis(kind=planner_pb2.Basis.Kind.Name(b.kind),
                     model_key=b.model_key, source=b.source, runs=b.runs,
                     oom_runs=b.oom_runs, min_batch=b.min_batch,
                     max_batch=b.max_batch, gpus=list(b.gpus),
                     extrapolation=b.extrapolation, why=b.why)

    def components(c: planner_pb2.ComponentsGb) -> dict[str, float]:
        return {f.name: getattr(c, f.name) for f in c.DESCRIPTOR.fields}

    def figures(f: planner_pb2.MemoryFigures) -> MemoryFigures:
        return _fields(MemoryFigures, f)

    def batch_figures(b: planner_pb2.TargetBatch) -> BatchFigures:
        return BatchFigures(
            batch=b.batch, figures=figures(b.figures), phase=b.phase,
            phases=[PhaseFigures(phase=p.phase, figures=figures(p.figures),
                                 holds=p.holds) for p in b.phases])

    def device(t: planner_pb2.TargetResult) -> DeviceCosts | None:
        if not t.HasField("device"):
            return None
        d = t.device
        return DeviceCosts(
            reserved_ratio=d.reserved_ratio, context_gb=d.context_gb,
            nccl_gb=d.nccl_gb, reserved_basis=d.reserved_basis,
            context_basis=d.context_basis, nccl_basis=d.nccl_basis)

    def bound(b) -> KindBound | None:
        if not response.HasField("bound") or not b.kind:
            return None
        return KindBound(kind=b.kind, k_allocated=b.k_allocated,
                         k_reserved=b.k_reserved, k_device=b.k_device,
                         measurements=b.measurements, widest=b.widest,
                         untested=b.untested, note=b.note)

    return FitAnswer(
        model=response.model, params=response.params,
        factor_set_version=response.factor_set_version,
        headroom=response.headroom, coverage=response.coverage, k=response.k,
        estimates=[Estimate(batch=e.batch, peak_gb=e.peak_gb,
                            upper_gb=e.upper_gb, k=e.k, moment=e.moment,
                            components_gb=components(e.components),
                            basis=basis(e.basis), phase=e.phase)
                   for e in response.estimates],
        targets=[TargetAnswer(
            name=t.name, memory_gb=t.memory_gb,
            verdicts={b: model_pb2.Verdict.Name(v)
                      for b, v in zip(batches, t.verdicts)},
            peaks_gb=dict(zip(batches, t.peaks_gb)),
            max_batch_fits=t.max_batch_fits,
            max_batch_not_does_not_fit=t.max_batch_not_does_not_fit,
            regime=t.regime,
            # In request order, one per batch (TargetResult.batches).
            figures={b: batch_figures(f) for b, f in zip(batches, t.batches)},
            device=device(t), k=t.k, gpu_constant_gb=t.gpu_constant_gb)
                 for t in response.targets],
        learning=response.learning, assumptions=list(response.assumptions),
        bound=bound(response.bound), framework=response.framework,
        plan=list(response.plan),
        min_gpus=[MinGpusTarget(
            target=m.target, memory_gb=m.memory_gb, cheapest=m.cheapest,
            strategies=[_fields(MinGpusStrategy, s) for s in m.strategies])
            for m in response.min_gpus],
        job=job_derivation(response))


def job_derivation(
        response: planner_pb2.CheckFitResponse) -> JobDerivation | None:
    """The answer's JobDerivation, None without a job file."""
    if not response.HasField("job"):
        return None
    j = response.job
    return JobDerivation(
        kind=planner_pb2.JobFile.Kind.Name(j.kind), model_id=j.model_id,
        model=j.model, setup=to_dict(j.setup), batch=j.batch,
        micro_batch=j.micro_batch, from_file=list(j.from_file),
        defaults=list(j.defaults), overridden=list(j.overridden),
        ignored=list(j.ignored))


