"""A typed wrapper over the planner's gRPC API (proto/headroom/v1), a peer
of the CLI: the same setup words (read from the core's generated table,
headroom_client/vocabulary.py), fit answers with the smallest GPU counts
and the device figures, job files, probes with their live watch, energy.

CheckFit answers come back as dataclasses (answers.py); everything else as
dicts in the protobuf JSON mapping with the proto's field names and every
field present. Every failure raises HeadroomError: a failed call with its
gRPC status name, and a request refused before it is sent (an unknown
keyword or word, a number out of range, a file that cannot be read) as
INVALID_ARGUMENT naming the argument and what is allowed.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Iterable, Iterator, Sequence

import grpc
from google.protobuf import json_format

from headroom.v1 import energy_pb2, fleet_pb2, fleet_pb2_grpc, planner_pb2
from headroom.v1 import planner_pb2_grpc
from headroom_client import requests
from headroom_client.answers import FitAnswer, MinGpusTarget, fit_answer
from headroom_client.answers import to_dict
from headroom_client.errors import HeadroomError, invalid
from headroom_client.requests import Gpu, Model
from headroom_client.vocabulary import BuiltSetup, Vocabulary

# The CLI's `probe watch --watch_timeout_s` default (client/fleet_commands.h).
WATCH_TIMEOUT_S = 3600
_PROBE_STATES = [s for s in fleet_pb2.Probe.State.keys()
                 if s != "STATE_UNSPECIFIED"]


class Client:
    """A connection to one planner.

    token: sent as `authorization: Bearer <token>` on every call; a planner
    with --tokens_file checks its role (reader, operator, admin). ca: a PEM
    file of the root certificates to verify the planner with, which makes
    the channel TLS; without it the channel is plaintext. cert and key: this
    client's certificate and key (PEM files), for a planner that requires
    client certificates (--tls_client_ca). timeout_s: the deadline of each
    call. vocabulary: the setup table (default: the one shipped in the
    package, generated from the core).
    Use it as a context manager, or call close(), to release the channel.
    """

    def __init__(self, address: str = "127.0.0.1:50051",
                 token: str | None = None, ca: str | None = None,
                 timeout_s: float = 5.0, cert: str | None = None,
                 key: str | None = None,
                 vocabulary: Vocabulary | None = None):
        if bool(cert) != bool(key):
            raise invalid("cert and key go together: give both or neither")
        if cert and not ca:
            raise invalid("cert needs ca (the planner's CA)")
        if ca:
            def read(path, what):
                return requests.read_file(path, what, binary=True)
            credentials = grpc.ssl_channel_credentials(
                root_certificates=read(ca, "ca"),
                private_key=read(key, "key") if key else None,
                certificate_chain=read(cert, "cert") if cert else None)
            self._channel = grpc.secure_channel(address, credentials)
        else:
            self._channel = grpc.insecure_channel(address)
        self._metadata = ((("authorization", f"Bearer {token}"),) if token
                          else ())
        self._timeout_s = timeout_s
        self._vocabulary = vocabulary
        self._fit = planner_pb2_grpc.FitStub(self._channel)
        self._calibration = planner_pb2_grpc.CalibrationStub(self._channel)
        self._energy = planner_pb2_grpc.EnergyStub(self._channel)
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

    def vocabulary(self) -> Vocabulary:
        """The setup keys this client takes (keys(): name, help, default,
        words)."""
        if self._vocabulary is None:
            self._vocabulary = Vocabulary.shipped()
        return self._vocabulary

    def _setup(self, setup: dict[str, Any], what: str = "") -> BuiltSetup:
        """The setup keywords; with `what`, a call that is not a fit answer
        refuses words that ask for one (gpus='auto')."""
        built = self.vocabulary().build(setup)
        if what and built.request:
            field, by = next(iter(built.request_by.items()))
            raise invalid(f"{by} asks a fit answer (CheckFitRequest.{field}); "
                          f"{what} runs one given setup: give a value instead")
        return built

    def ping(self) -> None:
        """Returns when the planner answers; HeadroomError otherwise."""
        self._call(self._fit.Ping, planner_pb2.PingRequest())

    # --- Fit -------------------------------------------------------------

    def fit_request(self, model: Model | None = None,
                    batch: int | Iterable[int] | None = None,
                    gpu: Gpu | Sequence[Gpu] | None = None, *,
                    coverage: float = 0, learn: bool = False,
                    include_simulated: bool = False, job=None,
                    deepspeed=None, accelerate_config=None,
                    job_kind: str | None = None,
                    **setup) -> planner_pb2.CheckFitRequest:
        """The CheckFitRequest check_fit sends (the same arguments), without
        sending it."""
        if "gpus" in setup:
            gpu, setup["gpus"] = _gpus_compat(gpu, setup["gpus"],
                                              self.vocabulary())
            if setup["gpus"] is None:
                del setup["gpus"]
        built = self._setup(setup)
        request = requests.message(
            planner_pb2.CheckFitRequest, setup=built.setup,
            batches=requests.batches(batch), targets=requests.targets(gpu),
            coverage=coverage, learn=learn,
            include_simulated=include_simulated)
        if model is not None:
            request.model.CopyFrom(requests.model_ref(model))
        files = requests.job_files(job, deepspeed, accelerate_config,
                                   job_kind, built.paths)
        if files is not None:
            request.job.CopyFrom(files)
        elif model is None:
            raise invalid("model is required (a catalog name, a spec dict or "
                          "a .json file), or job=FILE that names it")
        for field, value in built.request.items():
            setattr(request, field, value)
        return request

    def check_fit(self, model: Model | None = None,
                  batch: int | Iterable[int] | None = None,
                  gpu: Gpu | Sequence[Gpu] | None = None,
                  **arguments) -> FitAnswer:
        """Peaks and verdicts of `model` at each batch on each card, as
        `headroom fit`.

        gpu: a card or a list of them: catalog names ("L4", "H100") or the
        names nvidia-smi prints ("NVIDIA L4"), or sizes in GB (16). Setup
        keywords, each as the CLI flag of the same name (vocabulary(); a
        keyword not given is left to the planner, which says what it
        assumed): precision, optimizer, attention, lora_rank, lora_targets,
        quant_base, parallel, offload, checkpointing, phases, framework ...
        gpus: the GPU count in all, or "auto": the smallest count per card
        and strategy (answer.min_gpus). coverage of the upper bound: 0.9 or
        0.95 (0: the planner's default). learn: when the answer is
        prior-only and a card is BORDERLINE, queue a probe (answer.learning
        says what happened). include_simulated: let runs from simulated
        GPUs anchor the answer. job: the job's own config file (litgpt,
        torchtune, axolotl, TRL YAML, TrainingArguments JSON), with
        deepspeed and accelerate_config files and job_kind where its keys
        do not tell; setup keywords given beside it override it and
        answer.job says what the files said. Each target's figures[batch]
        holds the allocated, reserved and device figures and every phase;
        the verdict compares the device upper bound (x headroom) with the
        card.
        """
        request = self.fit_request(model, batch, gpu, **arguments)
        response = self._call(self._fit.CheckFit, request)
        # A job file gives the batch when none was asked.
        batches = list(request.batches) or (
            [response.job.batch] if response.HasField("job") else [])
        return fit_answer(response, batches)

    def fits(self, model: Model, batch: int, gpu: Gpu, **setup) -> bool:
        """True iff the verdict is FITS (BORDERLINE is False: it may OOM).
        setup: check_fit's keyword arguments."""
        answer = self.check_fit(model, [batch], [gpu], **setup)
        return answer.targets[0].verdicts[batch] == "FITS"

    def min_gpus(self, model: Model, batch: int, gpu: Gpu | Sequence[Gpu],
                 **setup) -> list[MinGpusTarget]:
        """The smallest GPU count per card and strategy at `batch` per GPU
        (check_fit with gpus="auto"): for the setup's parallel, or for every
        strategy when none is given."""
        return self.check_fit(model, [batch], gpu, gpus="auto",
                              **setup).min_gpus

    def calibration(self, version: str = "") -> dict:
        """The factor set `version` ("fs-3"; empty: the current one) with its
        calibration page, as FactorSet in calibration.proto."""
        request = requests.message(planner_pb2.GetCalibrationRequest,
                                   version=version)
        return to_dict(self._call(self._calibration.GetCalibration,
                                  request).factor_set)

    # --- Probes ----------------------------------------------------------

    def submit_probe(self, model: Model, batches: int | Iterable[int],
                     gpu: str | None = None, worker: str | None = None,
                     executor: str = "", repetitions: int = 0,
                     steps: int = 0, warmup_steps: int = 0,
                     expires_s: int = 0, batch_timeout_s: float = 0,
                     **setup) -> str:
        """Queues a measurement of `model` at `batches` on a worker with a
        `gpu` of that catalog kind, or on the worker with id `worker` (one of
        them), as `headroom probe submit`; returns the probe id ("p-7").
        executor: "torch", "cuda", "sim" or "" for the worker's own.
        repetitions, steps, warmup_steps, expires_s, batch_timeout_s: as
        SubmitProbeRequest (0: the defaults). setup: check_fit's setup
        keywords; gpus is a count here (a probe runs on a given count)."""
        request = requests.message(
            fleet_pb2.SubmitProbeRequest, model=requests.model_ref(model),
            setup=self._setup(setup, "submit_probe").setup,
            batches=requests.batches(batches), executor=executor,
            repetitions=repetitions, steps=steps, warmup_steps=warmup_steps,
            expires_s=expires_s, batch_timeout_s=batch_timeout_s)
        _place(request, gpu, worker)
        return self._call(self._fleet.SubmitProbe, request).probe.id

    def probe(self, probe_id: str) -> dict:
        """The probe's state now (Probe in fleet.proto): "state", "results"
        per batch and repetition measured so far, "error"."""
        events = self._watch(probe_id, follow=False,
                             timeout_s=self._timeout_s)
        try:
            for event in events:
                if "probe" in event:
                    return event["probe"]
        finally:
            events.close()
        raise HeadroomError("UNKNOWN", f"WatchProbe {probe_id} sent no state")

    def watch_probe(self, probe_id: str,
                    timeout_s: float = WATCH_TIMEOUT_S) -> Iterator[dict]:
        """The probe's events until it is done, as `headroom probe watch`
        (WatchProbe with follow): {"probe": ...} first (the state and the
        results so far) and on every change of state, {"samples": ...}
        while a batch runs, {"result": ...} per batch measured. The last
        "probe" event holds the final state; a watch still running at
        timeout_s raises HeadroomError DEADLINE_EXCEEDED."""
        return self._watch(probe_id, follow=True, timeout_s=timeout_s)

    def _watch(self, probe_id: str, follow: bool,
               timeout_s: float) -> Iterator[dict]:
        request = requests.message(fleet_pb2.WatchProbeRequest, id=probe_id,
                                   follow=follow)
        stream = self._fleet.WatchProbe(request, timeout=timeout_s,
                                        metadata=self._metadata)
        try:
            for event in stream:
                yield to_dict(event)
        except grpc.RpcError as e:
            raise HeadroomError(e.code().name, e.details() or "") from None
        finally:
            # A caller that stops early (probe(), a break) ends the stream.
            stream.cancel()

    def cancel_probe(self, probe_id: str) -> dict:
        """Cancels a queued or running probe, as `headroom probe cancel`;
        returns the probe after it (its "state" says what became of it)."""
        request = requests.message(fleet_pb2.CancelProbeRequest, id=probe_id)
        return to_dict(self._call(self._fleet.CancelProbe, request).probe)

    def list_probes(self, state: str | None = None,
                    limit: int = 0) -> list[dict]:
        """Stored probes, newest first; state: "queued", "running",
        "succeeded", "failed" or "cancelled" (any case; None: all); limit 0
        = 100. Follows the server's pages (at most 500 probes each)."""
        state_value = 0
        if state:
            if not isinstance(state, str) or state.upper() not in _PROBE_STATES:
                raise invalid(f"state '{state}' is unknown; allowed "
                              f"{', '.join(s.lower() for s in _PROBE_STATES)}")
            state_value = fleet_pb2.Probe.State.Value(state.upper())
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            raise invalid(f"limit {limit!r} is invalid; allowed 0 (100) or "
                          "more")
        wanted = limit or 100
        request = fleet_pb2.ListProbesRequest(
            state=state_value, page_size=min(wanted, 500))
        probes = []
        for _ in range(10000):
            page = self._call(self._fleet.ListProbes, request)
            probes.extend(to_dict(p) for p in page.probes)
            if not page.next_page_token or len(probes) >= wanted:
                break
            request.page_token = page.next_page_token
        return probes[:wanted]

    # --- Energy ----------------------------------------------------------

    def estimate_energy(self, params_b: float, gpu: str | None = None,
                        arch: str | None = None, quant: str = "fp16") -> dict:
        """Inference energy per 1,000 generated tokens at params_b billion
        parameters on a catalog `gpu` or an architecture `arch` (one of
        them), under quant fp16, nf4 or int8, as `headroom energy`
        (EstimateEnergyResponse by its field names: de_pct, fp16_j_per_1k,
        quant_j_per_1k, the band, crossover_b, curves_version ...)."""
        if bool(gpu) == bool(arch):
            raise invalid("give gpu (a catalog GPU name) or arch (a GPU "
                          "architecture), one of them")
        request = requests.message(energy_pb2.EstimateEnergyRequest,
                                   params_b=params_b, quant=quant)
        if gpu:
            request.gpu = gpu
        else:
            request.arch = arch
        return to_dict(self._call(self._energy.EstimateEnergy, request))

    def train_energy(self, model: Model, batch: int, gpu: str,
                     include_simulated: bool = False, **setup) -> dict:
        """Joules per training step and per 1,000 training tokens of `model`
        at `batch` on a catalog `gpu`, as `headroom energy train`
        (TrainEnergyResponse: answer, compute_model, measured, evidence,
        j_per_tflop and its source). setup: check_fit's setup keywords."""
        if isinstance(batch, bool) or not isinstance(batch, int):
            raise invalid(f"batch {batch!r} is invalid; allowed one batch "
                          "size, 1 .. 1048576")
        targets = requests.targets(gpu)
        if len(targets) != 1 or not targets[0].gpu:
            raise invalid(f"gpu {gpu!r}: training energy needs one catalog "
                          "GPU name, not a size in GB")
        ref = requests.model_ref(model)
        request = requests.message(
            energy_pb2.TrainEnergyRequest,
            setup=self._setup(setup, "train_energy").setup, batch=batch,
            gpu=targets[0].gpu, include_simulated=include_simulated)
        kind = ref.WhichOneof("source")
        if kind == "spec":
            request.spec.CopyFrom(ref.spec)
        else:
            setattr(request, kind, getattr(ref, kind))
        return to_dict(self._call(self._energy.TrainEnergy, request))

    def refit_energy(self, runs: Iterable[dict] | str | os.PathLike = (),
                     stored: bool = False, subtract_idle: bool = False,
                     merge_anchors: bool = False,
                     include_simulated: bool = False,
                     force: bool = False) -> dict:
        """Refits the energy curves on the planner from `runs` (EnergyRun
        dicts, or the path of a JSON-lines file of them) and, with stored,
        the energy runs it stored from energy probes, as `headroom energy
        refit --stored`; the new set becomes current under the promotion
        rule or with force (RefitEnergyResponse)."""
        if isinstance(runs, (str, os.PathLike)):
            text = requests.read_file(runs, "runs")
            parsed = []
            for number, line in enumerate(text.splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    parsed.append(
                        json_format.Parse(line, energy_pb2.EnergyRun()))
                except json_format.ParseError as e:
                    raise invalid(
                        f"runs {os.fspath(runs)}:{number}: {e}") from None
        else:
            try:
                parsed = [json_format.ParseDict(r, energy_pb2.EnergyRun())
                          for r in runs]
            except (json_format.ParseError, TypeError, AttributeError) as e:
                raise invalid(f"runs: {e}; allowed EnergyRun dicts "
                              "(energy.proto) or the path of a JSON-lines "
                              "file") from None
        request = requests.message(
            energy_pb2.RefitEnergyRequest, runs=parsed, stored=stored,
            subtract_idle=subtract_idle,
            merge_anchors=merge_anchors, include_simulated=include_simulated,
            force=force)
        return to_dict(self._call(self._energy.RefitEnergy, request))

    def energy_curve_sets(self) -> dict:
        """Every stored energy curve set, oldest first, and the current
        version, as `headroom energy curves list`: {"curve_sets": [...],
        "current_version": "ec-N"}."""
        request = energy_pb2.ListEnergyCurveSetsRequest(page_size=500)
        sets, current = [], ""
        for _ in range(10000):
            page = self._call(self._energy.ListEnergyCurveSets, request)
            sets.extend(to_dict(s) for s in page.curve_sets)
            current = page.current_version
            if not page.next_page_token:
                break
            request.page_token = page.next_page_token
        return {"curve_sets": sets, "current_version": current}

    def promote_energy_curve_set(self, version: str = "",
                                 rollback: bool = False) -> dict:
        """Makes a stored curve set current, or rolls back to the one before
        (rollback=True, no version), as `headroom energy curves promote`;
        returns current_version and previous_version."""
        if bool(version) == bool(rollback):
            raise invalid("give version (e.g. 'ec-2') or rollback=True, one "
                          "of them")
        request = requests.message(energy_pb2.PromoteEnergyCurveSetRequest,
                                   version=version, rollback=rollback)
        return to_dict(self._call(self._energy.PromoteEnergyCurveSet,
                                  request))

    def plot_energy(self, arch: str, include_simulated: bool = False) -> dict:
        """The current curves of one architecture as SVG with the measured
        points, as `headroom energy plot`: {"svg", "curves_version",
        "points"}."""
        request = requests.message(
            energy_pb2.PlotEnergyRequest, arch=arch,
            include_simulated=include_simulated)
        return to_dict(self._call(self._energy.PlotEnergy, request))

    def submit_energy_probe(self, model: Model, gpu: str | None = None,
                            worker: str | None = None,
                            quants: Sequence[str] | str = (),
                            prompt_tokens: int = 0, new_tokens: int = 0,
                            repetitions: int = 0, executor: str = "",
                            batch_timeout_s: float = 0,
                            expires_s: int = 0) -> str:
        """Queues an energy measurement of `model` (generation at batch 1
        under each of quants: fp16, nf4, int8; empty: all three) on a `gpu`
        kind or a `worker`, as `headroom energy probe`; returns the probe
        id, which watch_probe follows."""
        if isinstance(quants, str):
            quants = [q.strip() for q in quants.split(",") if q.strip()]
        request = requests.message(
            fleet_pb2.SubmitEnergyProbeRequest,
            model=requests.model_ref(model), quants=list(quants),
            prompt_tokens=prompt_tokens, new_tokens=new_tokens,
            repetitions=repetitions, executor=executor,
            batch_timeout_s=batch_timeout_s, expires_s=expires_s)
        _place(request, gpu, worker)
        return self._call(self._fleet.SubmitEnergyProbe, request).probe.id


def _place(request, gpu: str | None, worker: str | None) -> None:
    """The placement oneof of a probe request: a GPU kind or a worker."""
    if bool(gpu) == bool(worker) or not isinstance(gpu or worker, str):
        raise invalid("give gpu (one catalog GPU kind, e.g. 'L4') or worker "
                      "(a worker id), one of them, as a string")
    if gpu:
        request.gpu = gpu
    else:
        request.worker = worker


def _gpus_compat(gpu, gpus, vocabulary: Vocabulary):
    """(gpu, gpus) with the old meaning of gpus (GPU kinds, before the
    setup's GPU count took the name) moved to gpu, with a
    DeprecationWarning; to be removed in the next release."""
    words = next((k.word_names() for k in vocabulary.keys()
                  if k.name == "gpus"), [])
    names_kinds = isinstance(gpus, (list, tuple)) or (
        isinstance(gpus, str) and not gpus.isdigit() and gpus not in words)
    if not names_kinds:
        return gpu, gpus
    if gpu is not None:
        raise invalid("gpu names the cards and gpus the GPU count; gpus="
                      f"{gpus!r} is neither a count nor "
                      f"{', '.join(words) or 'a word'}")
    warnings.warn("check_fit(gpus=[kinds]) is deprecated: the cards are gpu="
                  "(a name or a list), gpus is the GPU count or 'auto'",
                  DeprecationWarning, stacklevel=4)
    return gpus, None
