"""The parts of a request that are not the setup: the model, the cards, the
batches and the job's own config files, as the CLI's --model, --gpu,
--batch and --job read them. Every refusal is HeadroomError
INVALID_ARGUMENT naming the argument (and the file) and what is allowed.
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterable, Sequence, Union

from google.protobuf import json_format

from headroom.v1 import model_pb2, planner_pb2
from headroom_client.errors import invalid

# A catalog name ("bert-base", "llama-3.1-8b"), a ModelSpec in its JSON form
# (as models/*.json holds it), or the path of a .json file: a spec, or a
# Hugging Face config.json (the planner converts it).
Model = Union[str, os.PathLike, dict]
# A catalog GPU name ("L4", "H100") or the name nvidia-smi prints ("NVIDIA
# L4"), which the planner resolves; or a card size in GB (16, "16").
Gpu = Union[str, float]

# The planner refuses larger job files (client/job_flags.cc kMaxJobFileBytes).
MAX_JOB_FILE_BYTES = 1 << 20
# JobFile.Kind by the CLI's --job_kind words (client/job_flags.cc KindOf).
JOB_KINDS = {
    "litgpt": planner_pb2.JobFile.LITGPT,
    "torchtune": planner_pb2.JobFile.TORCHTUNE,
    "axolotl": planner_pb2.JobFile.AXOLOTL,
    "trl": planner_pb2.JobFile.TRL,
    "training-args": planner_pb2.JobFile.TRAINING_ARGUMENTS,
}


def message(cls, **fields):
    """cls with `fields` set one by one, so a value of the wrong type or
    range (a negative count, a string for a number) is INVALID_ARGUMENT
    naming the argument, not protobuf's TypeError or ValueError."""
    out = cls()
    for name, value in fields.items():
        fd = cls.DESCRIPTOR.fields_by_name[name]
        try:
            if fd.label == fd.LABEL_REPEATED:
                getattr(out, name).extend(value)
            elif fd.message_type is not None:
                getattr(out, name).CopyFrom(value)
            else:
                setattr(out, name, value)
        except (TypeError, ValueError) as e:
            raise invalid(f"{name} {value!r} is invalid: {e}") from None
    return out


def read_file(path: str | os.PathLike, what: str, binary: bool = False):
    """The file's text (or bytes); INVALID_ARGUMENT "WHAT PATH: reason"."""
    try:
        with open(path, "rb" if binary else "r",
                  encoding=None if binary else "utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else e
        raise invalid(f"{what} {os.fspath(path)}: {reason}") from None


def model_ref(model: Model) -> planner_pb2.ModelRef:
    """ModelRef of a catalog name, an inline spec or a .json file."""
    if isinstance(model, dict):
        return planner_pb2.ModelRef(spec=_parse_spec(model, "model spec"))
    if not isinstance(model, (str, os.PathLike)):
        raise invalid(f"model {model!r} is invalid; allowed a catalog name, "
                      "a spec as a dict, or the path of a .json file")
    path = os.fspath(model)
    # Catalog names are lowercase, digits and dashes: a ".json" name is
    # always a file, and a missing one says so instead of NOT_FOUND.
    if not (path.endswith(".json") or os.path.isfile(path)):
        return planner_pb2.ModelRef(template=path)
    text = read_file(path, "model")
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as e:
        raise invalid(f"model {path}: {e}") from None
    # A Hugging Face config.json names its model_type; a spec never does.
    if isinstance(parsed, dict) and "model_type" in parsed:
        return planner_pb2.ModelRef(hf_config=text)
    return planner_pb2.ModelRef(spec=_parse_spec(parsed, f"model {path}"))


def _parse_spec(spec: Any, what: str) -> model_pb2.ModelSpec:
    # Unknown fields are refused, as the planner refuses them in spec files.
    try:
        return json_format.ParseDict(spec, model_pb2.ModelSpec())
    except json_format.ParseError as e:
        raise invalid(f"{what}: {e}") from None


def targets(gpu: Gpu | Sequence[Gpu] | None) -> list[planner_pb2.Target]:
    """One Target per card; as `headroom fit --gpu`, anything that reads as
    a number is a size in GB."""
    if gpu is None:
        return []
    gpus = [gpu] if isinstance(gpu, (str, int, float)) else list(gpu)
    out = []
    for g in gpus:
        if isinstance(g, bool) or not isinstance(g, (str, int, float)):
            raise invalid(f"gpu {g!r} is invalid; allowed a catalog GPU name "
                          "(\"L4\", \"NVIDIA L4\") or a size in GB (16)")
        try:
            size = float(g)
        except ValueError:
            out.append(planner_pb2.Target(gpu=g))
            continue
        if not size > 0:
            raise invalid(f"gpu {g!r} is invalid; allowed a size in GB above 0"
                          " or a catalog GPU name")
        out.append(planner_pb2.Target(memory_gb=size))
    return out


def batches(batch: int | Iterable[int] | None) -> list[int]:
    """The batches as a list; each a count the wire can carry (the planner
    checks 1 .. 2^20)."""
    if batch is None:
        return []
    items = [batch] if isinstance(batch, int) else list(batch)
    for b in items:
        if isinstance(b, bool) or not isinstance(b, int) or not 0 <= b < 2**32:
            raise invalid(f"batch {b!r} is invalid; allowed 1 .. 1048576")
    return items


def _job_file(path: str | os.PathLike, what: str) -> planner_pb2.JobFile:
    content = read_file(path, what, binary=True)
    if len(content) > MAX_JOB_FILE_BYTES:
        raise invalid(f"{what} {os.fspath(path)} is {len(content)} bytes; "
                      f"allowed up to {MAX_JOB_FILE_BYTES} (1 MiB)")
    return planner_pb2.JobFile(name=os.fspath(path), content=content)


def job_files(job: str | os.PathLike | None, deepspeed=None,
              accelerate_config=None, job_kind: str | None = None,
              overrides: Sequence[str] = ()) -> planner_pb2.JobFiles | None:
    """JobFiles of the job's config (and its DeepSpeed / accelerate files),
    with the setup field paths given beside it as overrides; None without
    a job."""
    if job is None:
        if deepspeed or accelerate_config or job_kind:
            raise invalid("deepspeed, accelerate_config and job_kind go with "
                          "job=FILE (the job's own config)")
        return None
    files = planner_pb2.JobFiles(job=_job_file(job, "job"),
                                 overrides=list(overrides))
    if job_kind:
        if job_kind not in JOB_KINDS:
            raise invalid(f"job_kind '{job_kind}' is unknown; allowed "
                          f"{', '.join(JOB_KINDS)}")
        files.job.kind = JOB_KINDS[job_kind]
    if deepspeed:
        files.deepspeed.CopyFrom(_job_file(deepspeed, "deepspeed"))
    if accelerate_config:
        files.accelerate.CopyFrom(
            _job_file(accelerate_config, "accelerate_config"))
    return files
