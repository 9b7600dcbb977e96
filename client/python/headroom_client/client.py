"""A typed wrapper over the planner's gRPC API (proto/headroom/v1).

Answers come back as plain dataclasses (CheckFit) or as dicts in the
protobuf JSON mapping with the proto's field names (everything else), so
callers never handle generated messages. A failed call raises
HeadroomError, and so does a request refused before it is sent (an unknown
precision, a spec that does not parse); a spec or CA file that cannot be
read raises OSError.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence, Union

import grpc
from google.protobuf import json_format

from headroom.v1 import fleet_pb2, fleet_pb2_grpc, model_pb2, planner_pb2
from headroom.v1 import planner_pb2_grpc

# A catalog template name ("bert-base"), a ModelSpec in its JSON form (as
# models/*.json holds it), or the path of a .json file: a spec, or a Hugging
# Face config.json (the planner converts it).
Model = Union[str, os.PathLike, dict]
# A catalog GPU name ("L4", "H100") or a card size in GB (16, "16").
Gpu = Union[str, float]

_PRECISIONS = {
    "fp32": model_pb2.TrainingSetup.FP32,
    "bf16": model_pb2.TrainingSetup.BF16_MIXED,
    "fp16": model_pb2.TrainingSetup.FP16_MIXED,
}
_OPTIMIZERS = {
    "adamw": model_pb2.TrainingSetup.ADAMW,
    "sgd": model_pb2.TrainingSetup.SGD,
    "sgd-momentum": model_pb2.TrainingSetup.SGD_MOMENTUM,
}
# The job's phases by the names answers use (PhaseFigures.phase).
_PHASES = {
    "load": model_pb2.LOAD,
    "first-step": model_pb2.FIRST_STEP,
    "step": model_pb2.STEP,
    "eval": model_pb2.EVAL,
    "generate": model_pb2.GENERATE,
    "save": model_pb2.SAVE,
}
# TrainingSetup.framework by the CLI's --framework words.
_FRAMEWORKS = {
    "generic": model_pb2.TrainingSetup.GENERIC,
    "hf-trainer": model_pb2.TrainingSetup.HF_TRAINER,
    "litgpt": model_pb2.TrainingSetup.LITGPT,
    "torchtune": model_pb2.TrainingSetup.TORCHTUNE,
    "deepspeed": model_pb2.TrainingSetup.DEEPSPEED,
    "torch": model_pb2.TrainingSetup.TORCH,
}


class HeadroomError(Exception):
    """A call that failed. `code` is the gRPC status name ("NOT_FOUND",
    "INVALID_ARGUMENT", "UNAVAILABLE" when the planner cannot be reached,
    "DEADLINE_EXCEEDED" past timeout_s); `message` is the planner's reason."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


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

    def device_gb(self, batch: int) -> float:
        """What the device holds at `batch` (the largest phase), GB; the
        allocator's peak from a planner without device figures."""
        answer = self.figures.get(batch)
        return answer.figures.device_gb if answer else self.peaks_gb[batch]


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


def _invalid(message: str) -> HeadroomError:
    return HeadroomError("INVALID_ARGUMENT", message)


def _model_ref(model: Model) -> planner_pb2.ModelRef:
    if isinstance(model, dict):
        return planner_pb2.ModelRef(spec=_parse_spec(model, "model spec"))
    path = os.fspath(model)
    # Template names are lowercase, digits and dashes: a ".json" name is
    # always a file, and a missing one says so instead of NOT_FOUND.
    if not (path.endswith(".json") or os.path.isfile(path)):
        return planner_pb2.ModelRef(template=path)
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as e:
        raise _invalid(f"{path}: {e}") from None
    # A Hugging Face config.json names its model_type; a spec never does.
    if isinstance(parsed, dict) and "model_type" in parsed:
        return planner_pb2.ModelRef(hf_config=text)
    return planner_pb2.ModelRef(spec=_parse_spec(parsed, path))


def _parse_spec(spec: Any, what: str) -> model_pb2.ModelSpec:
    # Unknown fields are refused, as the planner refuses them in spec files.
    try:
        return json_format.ParseDict(spec, model_pb2.ModelSpec())
    except json_format.ParseError as e:
        raise _invalid(f"{what}: {e}") from None


def _target(gpu: Gpu) -> planner_pb2.Target:
    # As `headroom fit --gpu`: anything that reads as a number is a size.
    try:
        return planner_pb2.Target(memory_gb=float(gpu))
    except ValueError:
        return planner_pb2.Target(gpu=gpu)


def _setup(precision: str = "fp32", optimizer: str = "adamw",
           checkpointing: bool = False, fused_attention: bool = False,
           positions: int = 0, expandable_segments: bool = False,
           phases: Sequence[str] = (), eval_batch: int = 0,
           generate_tokens: int = 0, framework: str = "",
           framework_version: str = "") -> model_pb2.TrainingSetup:
    if precision not in _PRECISIONS:
        raise _invalid(f"precision {precision!r} is unknown; allowed "
                       f"{', '.join(_PRECISIONS)}")
    if optimizer not in _OPTIMIZERS:
        raise _invalid(f"optimizer {optimizer!r} is unknown; allowed "
                       f"{', '.join(_OPTIMIZERS)}")
    if isinstance(phases, str):
        phases = [p.strip() for p in phases.split(",") if p.strip()]
    for i, phase in enumerate(phases):
        if phase not in _PHASES:
            raise _invalid(f"phases: {phase!r} is unknown; allowed "
                           f"{', '.join(_PHASES)}")
        if phase in phases[:i]:
            raise _invalid(f"phases: {phase!r} is given twice; give each of "
                           f"{', '.join(_PHASES)} at most once")
    for name, value in (("eval_batch", eval_batch),
                        ("generate_tokens", generate_tokens)):
        if not (isinstance(value, int) and 0 <= value < 2**32):
            raise _invalid(f"{name} {value!r} is not a count; allowed "
                           f"0 .. {2**32 - 1} (0: the default)")
    if framework and framework not in _FRAMEWORKS:
        raise _invalid(f"framework {framework!r} is unknown; allowed "
                       f"{', '.join(_FRAMEWORKS)}")
    if not isinstance(framework_version, str) or len(framework_version) > 32:
        raise _invalid("framework_version must be a string of at most 32 "
                       "bytes, such as '0.5.10'")
    return model_pb2.TrainingSetup(
        framework=_FRAMEWORKS.get(framework, 0),
        framework_version=framework_version,
        precision=_PRECISIONS[precision], optimizer=_OPTIMIZERS[optimizer],
        activation_checkpointing=checkpointing,
        fused_attention=fused_attention, positions=positions,
        expandable_segments=expandable_segments,
        phases=[_PHASES[p] for p in phases], eval_batch=eval_batch,
        generate_tokens=generate_tokens)


def _batches(batch: int | Iterable[int]) -> list[int]:
    batches = [batch] if isinstance(batch, int) else list(batch)
    # uint32 on the wire; the planner checks the range (1 .. 2^20).
    for b in batches:
        if not 0 <= b < 2**32:
            raise _invalid(f"batch {b} is not a batch size")
    return batches


def _to_dict(message) -> dict:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def _answer(response: planner_pb2.CheckFitResponse,
            batches: list[int]) -> FitAnswer:
    def basis(b: planner_pb2.Basis) -> Basis:
        return Basis(kind=planner_pb2.Basis.Kind.Name(b.kind),
                     model_key=b.model_key, source=b.source, runs=b.runs,
                     oom_runs=b.oom_runs, min_batch=b.min_batch,
                     max_batch=b.max_batch, gpus=list(b.gpus),
                     extrapolation=b.extrapolation, why=b.why)

    def components(c: planner_pb2.ComponentsGb) -> dict[str, float]:
        return {f.name: getattr(c, f.name) for f in c.DESCRIPTOR.fields}

    def figures(f: planner_pb2.MemoryFigures) -> MemoryFigures:
        return MemoryFigures(**{d.name: getattr(f, d.name)
                                for d in f.DESCRIPTOR.fields})

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
            device=device(t)) for t in response.targets],
        learning=response.learning, assumptions=list(response.assumptions),
        bound=bound(response.bound), framework=response.framework,
        plan=list(response.plan))


class Client:
    """A connection to one planner.

    token: sent as `authorization: Bearer <token>` on every call; a planner
    with --tokens_file checks its role (reader, operator, admin). ca: a PEM
    file of the root certificates to verify the planner with, which makes
    the channel TLS; without it the channel is plaintext. cert and key: this
    client's certificate and key (PEM files), for a planner that requires
    client certificates (--tls_client_ca). timeout_s: the deadline of each
    call.
    Use it as a context manager, or call close(), to release the channel.
    """

    def __init__(self, address: str = "127.0.0.1:50051",
                 token: str | None = None, ca: str | None = None,
                 timeout_s: float = 5.0, cert: str | None = None,
                 key: str | None = None):
        if bool(cert) != bool(key):
            raise ValueError("cert and key go together: give both or neither")
        if cert and not ca:
            raise ValueError("cert needs ca (the planner's CA)")
        if ca:
            def read(path):
                with open(path, "rb") as f:
                    return f.read()
            credentials = grpc.ssl_channel_credentials(
                root_certificates=read(ca),
                private_key=read(key) if key else None,
                certificate_chain=read(cert) if cert else None)
            self._channel = grpc.secure_channel(address, credentials)
        else:
            self._channel = grpc.insecure_channel(address)
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._timeout_s = timeout_s
        self._fit = planner_pb2_grpc.FitStub(self._channel)
        self._calibration = planner_pb2_grpc.CalibrationStub(self._channel)
        self._fleet = fleet_pb2_grpc.FleetStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _call(self, method, request):
        try:
            return method(request, timeout=self._timeout_s,
                          metadata=self._metadata)
        except grpc.RpcError as e:
            raise HeadroomError(e.code().name, e.details() or "") from None

    def ping(self) -> None:
        """Returns when the planner answers; HeadroomError otherwise."""
        self._call(self._fit.Ping, planner_pb2.PingRequest())

    def check_fit(self, model: Model, batch: int | Iterable[int],
                  gpus: Gpu | Sequence[Gpu], precision: str = "fp32",
                  optimizer: str = "adamw", checkpointing: bool = False,
                  fused_attention: bool = False, positions: int = 0,
                  coverage: float = 0, learn: bool = False,
                  include_simulated: bool = False,
                  expandable_segments: bool = False,
                  phases: Sequence[str] | str = (), eval_batch: int = 0,
                  generate_tokens: int = 0, framework: str = "",
                  framework_version: str = "") -> FitAnswer:
        """Peaks and verdicts of `model` at each batch on each of `gpus`.

        precision: "fp32", "bf16" or "fp16" (mixed precision); optimizer:
        "adamw", "sgd" or "sgd-momentum". positions overrides the spec's
        sequence length (0 keeps it). coverage of the upper bound: 0.9 or
        0.95 (0: the planner's default). learn: when the answer is
        prior-only and a card is BORDERLINE, queue a probe on a worker
        (answer.learning says what happened). include_simulated: let runs
        from simulated GPUs anchor the answer. expandable_segments: the
        job sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True. phases:
        the job's phases, of "load", "first-step", "step", "eval",
        "generate", "save" (empty: load and step); eval_batch and
        generate_tokens size the eval and generate phases (0: the training
        batch, 128 tokens). framework: what runs the job, of "generic",
        "hf-trainer", "litgpt", "torchtune", "deepspeed", "torch" (empty:
        generic), with framework_version where its behaviour changed; the
        answer names the profile (answer.framework) and its plan
        (answer.plan). Each target's figures[batch] gives the
        allocated, reserved and device figures and every phase; the
        verdict compares the device upper bound (x headroom) with the card.
        """
        batches = _batches(batch)
        if isinstance(gpus, (str, int, float)):
            gpus = [gpus]
        request = planner_pb2.CheckFitRequest(
            model=_model_ref(model),
            setup=_setup(precision, optimizer, checkpointing,
                         fused_attention, positions, expandable_segments,
                         phases, eval_batch, generate_tokens, framework,
                         framework_version),
            batches=batches, targets=[_target(g) for g in gpus],
            coverage=coverage, learn=learn,
            include_simulated=include_simulated)
        return _answer(self._call(self._fit.CheckFit, request), batches)

    def fits(self, model: Model, batch: int, gpu: Gpu, **setup) -> bool:
        """True iff the verdict is FITS (BORDERLINE is False: it may OOM).
        setup: check_fit's keyword arguments."""
        answer = self.check_fit(model, [batch], [gpu], **setup)
        return answer.targets[0].verdicts[batch] == "FITS"

    def calibration(self, version: str = "") -> dict:
        """The factor set `version` ("fs-3"; empty: the current one) with its
        calibration page, as FactorSet in calibration.proto."""
        request = planner_pb2.GetCalibrationRequest(version=version)
        return _to_dict(self._call(self._calibration.GetCalibration,
                                   request).factor_set)

    def submit_probe(self, model: Model, batches: Iterable[int],
                     gpu: str | None = None, worker: str | None = None,
                     executor: str = "", repetitions: int = 0,
                     **setup) -> str:
        """Queues a measurement of `model` at `batches` on a worker with a
        `gpu` of that catalog kind, or on the worker with id `worker` (not
        both); returns the probe id ("p-7"). executor: "torch", "cuda",
        "sim" or "" for the worker's own. repetitions: 0 means 1.
        setup: precision, optimizer, checkpointing, fused_attention,
        positions, expandable_segments, phases, eval_batch, generate_tokens
        as in check_fit."""
        if gpu and worker:
            raise _invalid("give gpu or worker, not both")
        request = fleet_pb2.SubmitProbeRequest(
            model=_model_ref(model), setup=_setup(**setup),
            batches=_batches(batches), executor=executor,
            repetitions=repetitions)
        if gpu:
            request.gpu = gpu
        elif worker:
            request.worker = worker
        return self._call(self._fleet.SubmitProbe, request).probe.id

    def probe(self, probe_id: str) -> dict:
        """The probe's state now (Probe in fleet.proto): "state", "results"
        per batch and repetition measured so far, "error"."""
        request = fleet_pb2.WatchProbeRequest(id=probe_id, follow=False)
        try:
            stream = self._fleet.WatchProbe(request, timeout=self._timeout_s,
                                            metadata=self._metadata)
            for event in stream:
                if event.HasField("probe"):
                    stream.cancel()
                    return _to_dict(event.probe)
        except grpc.RpcError as e:
            raise HeadroomError(e.code().name, e.details() or "") from None
        raise HeadroomError("UNKNOWN", f"WatchProbe {probe_id} sent no state")

    def list_probes(self, state: str | None = None, limit: int = 0) -> list[dict]:
        """Stored probes, newest first; state: "QUEUED", "RUNNING",
        "SUCCEEDED", "FAILED" or "CANCELLED" (None: all); limit 0 = 100.
        Follows the server's pages (at most 500 probes each) up to limit."""
        try:
            state_value = fleet_pb2.Probe.State.Value(state) if state else 0
        except ValueError:
            raise _invalid(f"probe state {state!r} is unknown") from None
        wanted = limit or 100
        request = fleet_pb2.ListProbesRequest(
            state=state_value, page_size=min(wanted, 500))
        probes = []
        for _ in range(10000):
            page = self._call(self._fleet.ListProbes, request)
            probes.extend(_to_dict(p) for p in page.probes)
            if not page.next_page_token or len(probes) >= wanted:
                break
            request.page_token = page.next_page_token
        return probes[:wanted]
