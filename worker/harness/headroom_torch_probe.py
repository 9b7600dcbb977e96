#!/usr/bin/env python3
"""Builds a Headroom model spec in PyTorch and measures its training step.

The `torch` probe executor of headroom-worker runs this file as a subprocess.
It reads the planner's own spec (models/*.json: the proto3 JSON of
headroom.v1.ModelSpec) so that prediction and measurement describe the same
graph. Commands:

  count --spec FILE            one JSON line: name, params, trainable_params
                               (built on the meta device: nothing allocated)
  run --spec FILE --batches 1,2,4 [--setup JSON|FILE] [--warmup 1]
      [--steps 3] [--device cuda|cuda:0|cpu] [--positions N]
                               JSON lines: hello, then per batch a
                               batch_start and a result (README.md); on a
                               GPU with NVML the result's energy_j is the
                               total-energy counter over the timed steps only
  generate --hf_config FILE --quant fp16|nf4|int8 [--prompt_tokens 64]
      [--new_tokens 128] [--warmup 1] [--device cuda:0] [--idle_s 1]
                               an energy probe: idle power first, then the
                               architecture built with random weights at the
                               quantization (bitsandbytes for nf4/int8), a
                               warm-up generation, and NVML's total-energy
                               counter read around one synchronized
                               generation window; one "generation" line

Bad input gives one {"event": "error"} line naming the field and exit 2.
Needs python3 and torch (Debian 12's python3-torch 1.13 or a CUDA torch 2.x).
"""

import argparse
import contextlib
import dataclasses
import datetime
import functools
import gc
import itertools
import json
import math
import os
import platform
import re
import resource
import socket
import sys
import threading
import time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils import checkpoint as torch_checkpoint
except ImportError as import_error:
    if __name__ == "__main__":
        print(json.dumps({"event": "error",
                          "error": f"python3-torch is not installed: {import_error}"}),
              flush=True)
        sys.exit(2)
    raise

# Limits shared with the planner (core/memory/model_spec.h).
MAX_DIMENSION = 1 << 32
MAX_BLOCK_DEPTH = 8
MAX_REPEAT = 100000
MAX_NUM_LAYERS = 1000
# Limits of the run command, so a mistyped flag cannot loop for hours.
MAX_BATCH = 1 << 20
MAX_STEPS = 1000

EXIT_BAD_INPUT = 2
# torch < 2.0 has no fused attention kernel: fused layers then run the eager
# path, and the hello line says "sdpa": false.
HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


class SpecError(ValueError):
    """A spec, setup or flag the harness cannot use; the message names it."""


# --------------------------------------------------------------------------
# Reading the spec and the setup: protobuf's generated Python code
# (headroom/v1/model_pb2.py, made by protoc --python_out at build time), so
# the schema is the planner's own proto/headroom/v1/model.proto.
# --------------------------------------------------------------------------

PROTO_ENV = "HEADROOM_PYTHON_PROTO"
_PROTO = {}  # "model_pb2", "json_format" once imported


def proto_search_path(flag=None):
    """Where headroom/v1/model_pb2.py is looked for: --proto_path alone when
    given; else $HEADROOM_PYTHON_PROTO, then python/ next to this script, the
    installed share/headroom/python (bin/../share), and the source tree's
    build/python."""
    if flag:
        return [flag]
    here = os.path.dirname(os.path.abspath(__file__))
    paths = [os.environ[PROTO_ENV]] if os.environ.get(PROTO_ENV) else []
    paths += [os.path.join(here, "python"),
              os.path.normpath(os.path.join(here, "..", "share", "headroom", "python")),
              os.path.normpath(os.path.join(here, "..", "..", "build", "python"))]
    return paths


def load_proto(flag=None):
    """Imports the generated headroom.v1 modules; SpecError says what is
    missing and where it looked."""
    if _PROTO and flag is None:
        return _PROTO["model_pb2"], _PROTO["json_format"]
    try:
        from google.protobuf import json_format
    except ImportError as error:
        raise SpecError(f"python3-protobuf is not installed ({error}): install Debian's "
                        "python3-protobuf or `pip install protobuf`") from None
    tried = proto_search_path(flag)
    for path in tried:
        if os.path.isfile(os.path.join(path, "headroom", "v1", "model_pb2.py")):
            if path not in sys.path:
                sys.path.insert(0, path)
            from headroom.v1 import model_pb2
            _PROTO.update(model_pb2=model_pb2, json_format=json_format)
            return model_pb2, json_format
    raise SpecError("headroom/v1/model_pb2.py (protoc --python_out; `ninja -C build "
                    "headroom_harness_proto`) is in none of: " + ", ".join(tried) +
                    f"; pass --proto_path DIR or set {PROTO_ENV}")


def _parse_json(text, message, what):
    """json_format.Parse with unknown fields rejected (as the planner's
    loader, ignore_unknown = false); the error names the field."""
    _, json_format = load_proto()
    try:
        json_format.Parse(text, message)
    except json_format.ParseError as error:
        detail = str(error).split("\n")[0][:400]
        raise SpecError(f"{what}: {detail}") from None
    return message


def _enum_name(fd, number, path):
    value = fd.enum_type.values_by_number.get(number)
    if value is None:
        allowed = ", ".join(v.name for v in fd.enum_type.values if v.number != 0)
        raise SpecError(f"{path}.{fd.name} = {number} is unknown; allowed {allowed}")
    return value.name


def _fields(message, path):
    """The fields of one message as a dict of proto3 values (enums by name,
    repeated fields as lists)."""
    out = {}
    for fd in message.DESCRIPTOR.fields:
        value = getattr(message, fd.name)
        if fd.label == fd.LABEL_REPEATED:
            value = list(value)
        elif fd.enum_type is not None:
            value = _enum_name(fd, value, path)
        out[fd.name] = value
    return out


LAYER_KINDS = ("embedding", "linear", "norm", "attention", "mlp", "moe", "conv",
               "recurrent", "elementwise", "parameters", "block")
ELEMENTWISE_OPS = ("OP_UNSPECIFIED", "ACTIVATION", "POOL", "DROPOUT", "ADD",
                   "CONCAT", "SOFTMAX")


@dataclasses.dataclass
class Layer:
    """One layer of the spec with proto3 defaults filled in."""
    path: str            # e.g. "spec.layers[3].block.layers[1]", for errors
    name: str
    repeat: int          # copies in sequence, 0 read as 1
    positions: int       # 0 inherits
    frozen: bool
    kind: str            # a key of LAYER_KINDS
    f: dict              # the kind's fields, every one present
    children: list       # for a block


@dataclasses.dataclass
class Spec:
    name: str
    positions: int
    layers: list




def _check_size(value, path, required):
    if value == 0 and not required:
        return
    if value == 0 or value > MAX_DIMENSION:
        raise SpecError(f"{path} = {value} is out of range; allowed 1..{MAX_DIMENSION}")



def _read_layer(message, path, inherited_positions, depth):
    kind = message.WhichOneof("kind")
    if kind is None:
        raise SpecError(f"{path} has no kind; allowed: {', '.join(LAYER_KINDS)}")
    fields = _fields(getattr(message, kind), f"{path}.{kind}")
    layer = Layer(path=path, name=message.name, repeat=message.repeat,
                  positions=message.positions, frozen=message.frozen,
                  kind=kind, f=fields, children=[])
    if layer.repeat > MAX_REPEAT:
        raise SpecError(f"{path}.repeat = {layer.repeat} is out of range; "
                        f"allowed 0..{MAX_REPEAT}")
    _check_size(layer.positions, f"{path}.positions", False)
    positions = layer.positions or inherited_positions
    if kind not in ("parameters", "block") and positions == 0:
        raise SpecError(f"{path}.positions is not set and the spec has no default "
                        f"positions; allowed 1..{MAX_DIMENSION}")
    _validate_kind(layer, positions, depth)
    return layer


def _validate_kind(layer, positions, depth):
    """The planner's ValidateLayer checks, with the same field paths."""
    p, f, kind = f"{layer.path}.{layer.kind}", layer.f, layer.kind
    if kind == "embedding":
        _check_size(f["num_embeddings"], p + ".num_embeddings", True)
        _check_size(f["dim"], p + ".dim", True)
        _check_size(f["lookups"], p + ".lookups", False)
    elif kind == "linear":
        _check_size(f["in_features"], p + ".in_features", True)
        _check_size(f["out_features"], p + ".out_features", True)
    elif kind == "norm":
        if f["kind"] == "KIND_UNSPECIFIED":
            raise SpecError(f"{p}.kind is not set; allowed LAYER, RMS, BATCH, GROUP")
        _check_size(f["dim"], p + ".dim", True)
    elif kind == "attention":
        for name in ("hidden", "heads"):
            _check_size(f[name], f"{p}.{name}", True)
        for name in ("kv_heads", "head_dim", "kv_input_dim", "kv_positions", "window"):
            _check_size(f[name], f"{p}.{name}", False)
        if f["head_dim"] == 0 and f["hidden"] % f["heads"] != 0:
            raise SpecError(f"{p}.heads = {f['heads']} does not divide hidden = "
                            f"{f['hidden']}; set head_dim or use a divisor of hidden")
        kv_heads = f["kv_heads"] or f["heads"]
        if kv_heads > f["heads"] or f["heads"] % kv_heads != 0:
            raise SpecError(f"{p}.kv_heads = {f['kv_heads']} must divide heads = {f['heads']}")
    elif kind == "mlp":
        _check_size(f["hidden"], p + ".hidden", True)
        _check_size(f["ffn"], p + ".ffn", True)
    elif kind == "moe":
        for name in ("hidden", "ffn", "experts", "top_k"):
            _check_size(f[name], f"{p}.{name}", True)
        if f["top_k"] > f["experts"]:
            raise SpecError(f"{p}.top_k = {f['top_k']} is out of range; allowed "
                            f"1..{f['experts']} (experts)")
        _check_size(f["shared_experts"], p + ".shared_experts", False)
    elif kind == "conv":
        _check_size(f["in_channels"], p + ".in_channels", True)
        _check_size(f["out_channels"], p + ".out_channels", True)
        _check_size(f["groups"], p + ".groups", False)
        _check_size(f["in_positions"], p + ".in_positions", False)
        if f["dims"] > 3:
            raise SpecError(f"{p}.dims = {f['dims']} is out of range; allowed 0 (=2), 1, 2, 3")
        dims = f["dims"] or 2
        if len(f["kernel"]) not in (1, dims):
            raise SpecError(f"{p}.kernel has {len(f['kernel'])} values; allowed 1 or "
                            f"{dims} (dims)")
        for i, k in enumerate(f["kernel"]):
            _check_size(k, f"{p}.kernel[{i}]", True)
        groups = f["groups"] or 1
        if f["in_channels"] % groups or f["out_channels"] % groups:
            raise SpecError(f"{p}.groups = {groups} must divide in_channels and out_channels")
    elif kind == "recurrent":
        if f["cell"] == "CELL_UNSPECIFIED":
            raise SpecError(f"{p}.cell is not set; allowed RNN, LSTM, GRU")
        _check_size(f["input_size"], p + ".input_size", True)
        _check_size(f["hidden"], p + ".hidden", True)
        if f["num_layers"] > MAX_NUM_LAYERS:
            raise SpecError(f"{p}.num_layers = {f['num_layers']} is out of range; "
                            f"allowed 0..{MAX_NUM_LAYERS}")
    elif kind == "elementwise":
        if f["op"] == "OP_UNSPECIFIED":
            raise SpecError(f"{p}.op is not set; allowed {', '.join(ELEMENTWISE_OPS[1:])}")
        _check_size(f["dim"], p + ".dim", True)
    elif kind == "parameters":
        _check_size(f["count"], p + ".count", True)
    elif kind == "block":
        if depth >= MAX_BLOCK_DEPTH:
            raise SpecError(f"{layer.path}.block nests deeper than {MAX_BLOCK_DEPTH} levels")
        if not f["layers"]:
            raise SpecError(f"{layer.path}.block.layers is empty; a block needs at "
                            "least one layer")
        layer.children = [_read_layer(child, f"{p}.layers[{i}]", positions, depth + 1)
                          for i, child in enumerate(f["layers"])]


def parse_spec(text, what):
    """A Spec from the JSON text of a ModelSpec; SpecError names the field."""
    model_pb2, _ = load_proto()
    message = _parse_json(text, model_pb2.ModelSpec(), what)
    name = message.name
    if not name:
        raise SpecError("spec.name is empty; give the model a name (lowercase, digits, dashes)")
    if not message.layers:
        raise SpecError(f"spec.layers is empty for model '{name}'; a spec needs at least one layer")
    positions = message.positions
    _check_size(positions, "spec.positions", False)
    layers = [_read_layer(layer, f"spec.layers[{i}]", positions, 0)
              for i, layer in enumerate(message.layers)]
    return Spec(name=name, positions=positions, layers=layers)


def load_spec(path):
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except OSError as error:
        raise SpecError(f"--spec {path}: cannot read: {error.strerror}") from None
    return parse_spec(text, f"--spec {path}")


# The planner's limits and names (core/memory/training_setup.{h,cc}).
MAX_LORA_RANK = 4096
MAX_GRAD_ACCUM = 1024
MAX_FREEZE_NAMES = 256
MAX_LORA_TARGETS = 16
LORA_TARGET_NAMES = ("q", "k", "v", "o", "gate", "up", "down")


@dataclasses.dataclass
class Setup:
    """headroom.v1.TrainingSetup with defaults resolved (enums by name)."""
    precision: str = "FP32"
    optimizer: str = "ADAMW"
    activation_checkpointing: bool = False
    fused_attention: bool = False
    positions: int = 0
    attention: str = "ATTENTION_UNSPECIFIED"
    optimizer_in_backward: bool = False
    lora_rank: int = 0
    lora_targets: list = dataclasses.field(default_factory=list)
    lora_dropout: float = 0.0
    quant_base: str = "BASE_QUANT_UNSPECIFIED"
    freeze_layers: list = dataclasses.field(default_factory=list)
    train_last_blocks: int = 0
    grad_accum: int = 0
    compile: bool = False
    # The parallel setup (TrainingSetup fields 20..25, core/memory/parallel.h).
    gpus: int = 0
    parallel: str = "PARALLEL_UNSPECIFIED"
    offload: str = "OFFLOAD_UNSPECIFIED"
    tensor_parallel: int = 0
    nodes: int = 0
    gpus_per_node: int = 0

    @property
    def true_half(self):
        return self.precision in ("BF16_TRUE", "FP16_TRUE")

    @property
    def half(self):
        return self.precision != "FP32"


def lora_targets(setup):
    """The linears LoRA adapts (the planner's LoraTargets)."""
    if setup.lora_rank == 0:
        return set()
    if not setup.lora_targets:
        return {"q", "v"}
    out = set()
    for target in setup.lora_targets:
        if target == "all-linear":
            out.update(LORA_TARGET_NAMES)
            out.add("linear")
        else:
            out.add(target)
    return out


def _bad(field, value, allowed):
    return SpecError(f"setup.{field} = {value} is not allowed; {allowed}")


def setup_from_message(message):
    """A Setup from a headroom.v1.TrainingSetup, checked as ValidateSetup."""
    f = _fields(message, "setup")
    lora, freeze = message.lora, message.freeze
    setup = Setup(precision=f["precision"], optimizer=f["optimizer"],
                  activation_checkpointing=f["activation_checkpointing"],
                  fused_attention=f["fused_attention"], positions=f["positions"],
                  attention=f["attention"],
                  optimizer_in_backward=f["optimizer_in_backward"],
                  lora_rank=lora.rank, lora_targets=list(lora.targets),
                  lora_dropout=lora.dropout, quant_base=f["quant_base"],
                  freeze_layers=list(freeze.layers),
                  train_last_blocks=freeze.train_last_blocks,
                  grad_accum=f["grad_accum"], compile=f["compile"],
                  gpus=f["gpus"], parallel=f["parallel"], offload=f["offload"],
                  tensor_parallel=f["tensor_parallel"], nodes=f["nodes"],
                  gpus_per_node=f["gpus_per_node"])
    if setup.precision == "PRECISION_UNSPECIFIED":
        setup.precision = "FP32"
    if setup.optimizer == "OPTIMIZER_UNSPECIFIED":
        setup.optimizer = "ADAMW"
    if setup.positions > MAX_DIMENSION:
        raise SpecError(f"setup.positions = {setup.positions} is out of range; allowed "
                        f"0 (the model's standard) .. {MAX_DIMENSION}")
    if setup.attention == "FLASH" and not setup.half:
        raise _bad("attention", "FLASH", "FlashAttention runs in 16 bits only: allowed "
                   "with precision BF16_MIXED, FP16_MIXED, BF16_TRUE or FP16_TRUE")
    if setup.grad_accum > MAX_GRAD_ACCUM:
        raise _bad("grad_accum", setup.grad_accum, f"allowed 0 or 1 (none) .. {MAX_GRAD_ACCUM}")
    if setup.optimizer_in_backward and setup.grad_accum > 1:
        raise _bad("grad_accum", setup.grad_accum, "optimizer_in_backward steps during "
                   "every backward, so it allows grad_accum 0 or 1 only")
    if setup.lora_rank > MAX_LORA_RANK:
        raise _bad("lora.rank", setup.lora_rank, f"allowed 0 (no adapters) .. {MAX_LORA_RANK}")
    if setup.lora_rank == 0 and (setup.lora_targets or setup.lora_dropout):
        raise _bad("lora.rank", 0, "lora.targets and lora.dropout need lora.rank 1 .. 4096")
    if not 0 <= setup.lora_dropout < 1:
        raise _bad("lora.dropout", setup.lora_dropout, "allowed 0 <= dropout < 1")
    if len(setup.lora_targets) > MAX_LORA_TARGETS:
        raise _bad("lora.targets", f"{len(setup.lora_targets)} entries",
                   f"allowed at most {MAX_LORA_TARGETS}")
    for i, target in enumerate(setup.lora_targets):
        if target != "all-linear" and target not in LORA_TARGET_NAMES:
            raise _bad(f"lora.targets[{i}]", f"'{target[:64]}'",
                       "allowed q, k, v, o, gate, up, down, all-linear")
    if setup.quant_base != "BASE_QUANT_UNSPECIFIED" and setup.lora_rank == 0:
        raise _bad("quant_base", setup.quant_base, "a quantized base trains only through "
                   "adapters: set lora.rank 1 .. 4096")
    if len(setup.freeze_layers) > MAX_FREEZE_NAMES:
        raise _bad("freeze.layers", f"{len(setup.freeze_layers)} entries",
                   f"allowed at most {MAX_FREEZE_NAMES}")
    for i, name in enumerate(setup.freeze_layers):
        if not name or len(name.encode()) > 256:
            raise _bad(f"freeze.layers[{i}]", f"a name of {len(name.encode())} bytes",
                       "allowed a top-level layer name of 1 .. 256 bytes")
    if setup.train_last_blocks > MAX_REPEAT:
        raise _bad("freeze.train_last_blocks", setup.train_last_blocks,
                   f"allowed 0 (off) .. {MAX_REPEAT}")
    _check_parallel(setup)
    return setup


MAX_GPUS = 512  # kMaxGpus
# Sharding stage per strategy (StrategyStage: ZeRO's numbering).
PARALLEL_STAGE = {"PARALLEL_UNSPECIFIED": 0, "DDP": 0, "FSDP_FULL": 3, "FSDP_GRAD_OP": 2,
                  "FSDP_HYBRID": 3, "ZERO1": 1, "ZERO2": 2, "ZERO3": 3}


def _check_parallel(setup):
    """The planner's ValidateParallel rules, naming the field."""
    for field in ("gpus", "nodes", "gpus_per_node", "tensor_parallel"):
        if getattr(setup, field) > MAX_GPUS:
            raise _bad(field, getattr(setup, field), f"allowed 0 .. {MAX_GPUS}")
    tp = max(1, setup.tensor_parallel)
    if (setup.gpus > 1 and setup.gpus % tp) or (setup.gpus <= 1 and tp > 1 and setup.nodes <= 1):
        raise _bad("tensor_parallel", setup.tensor_parallel,
                   f"allowed 0 or 1 (none) or a divisor of gpus ({setup.gpus})")
    if setup.nodes > 1 and setup.gpus > 1:
        per_node = setup.gpus_per_node or setup.gpus // setup.nodes
        if per_node == 0 or per_node * setup.nodes != setup.gpus:
            raise _bad("nodes", setup.nodes, f"gpus ({setup.gpus}) must be nodes x gpus_per_node")
    stage = PARALLEL_STAGE[setup.parallel]
    if setup.offload != "OFFLOAD_UNSPECIFIED" and stage == 0:
        raise _bad("offload", setup.offload, "offload needs a sharded strategy: parallel ZERO1, "
                   "ZERO2, ZERO3, FSDP_GRAD_OP, FSDP_FULL or FSDP_HYBRID")
    if setup.offload in ("PARAMS", "BOTH") and stage != 3:
        raise _bad("offload", setup.offload, "offloading the weights needs sharded weights: "
                   "parallel ZERO3, FSDP_FULL or FSDP_HYBRID")
    if has_parallel(setup) and setup.optimizer_in_backward and stage >= 2:
        raise _bad("optimizer_in_backward", "true", "a step per parameter in backward needs "
                   "unsharded gradients: parallel DDP or ZERO1")


def parse_setup(text):
    """--setup: TrainingSetup JSON text, or the path of a file holding it."""
    if text is None:
        return Setup()
    if not text.lstrip().startswith("{"):
        try:
            with open(text, encoding="utf-8") as file:
                text = file.read()
        except OSError as error:
            raise SpecError(f"--setup {text}: not JSON and not a readable file "
                            f"({error.strerror})") from None
    model_pb2, _ = load_proto()
    return setup_from_message(_parse_json(text, model_pb2.TrainingSetup(), "--setup"))


def _matches(pattern, name):
    if pattern.endswith("*"):
        return name.startswith(pattern[:-1])
    return pattern == name


def apply_freeze(spec, setup):
    """The planner's ApplyFreeze: (spec with the frozen prefix marked and a
    repeated block split at train_last_blocks, weights_frozen per top-level
    layer). The leading layers that train nothing are marked later, once
    the adapters are known (Program)."""
    layers = [dataclasses.replace(layer) for layer in spec.layers]
    if setup.train_last_blocks:
        last = max((i for i, layer in enumerate(layers) if layer.repeat > 1), default=-1)
        if last < 0:
            raise SpecError(f"setup.freeze.train_last_blocks = {setup.train_last_blocks}: "
                            f"model {spec.name} has no repeated block to train the last "
                            "copies of; use freeze.layers with its layer names")
        repeat = layers[last].repeat
        if setup.train_last_blocks < repeat:
            head = dataclasses.replace(layers[last], repeat=repeat - setup.train_last_blocks,
                                       frozen=True, name=layers[last].name + " (frozen copies)")
            layers[last] = dataclasses.replace(layers[last], repeat=setup.train_last_blocks)
            layers.insert(last, head)
            last += 1
        for i in range(last):
            layers[i] = dataclasses.replace(layers[i], frozen=True)
    weights_frozen = [setup.lora_rank != 0] * len(layers)
    for n, pattern in enumerate(setup.freeze_layers):
        hits = [i for i, layer in enumerate(layers) if _matches(pattern, layer.name)]
        if not hits:
            names = [layer.name for layer in spec.layers if layer.name][:24]
            raise SpecError(f"setup.freeze.layers[{n}] = '{pattern[:64]}' names no top-level "
                            f"layer of {spec.name}; its layers: "
                            f"{', '.join(names) or '(unnamed)'}")
        for i in hits:
            weights_frozen[i] = True
    return Spec(name=spec.name, positions=spec.positions, layers=layers), weights_frozen


# --------------------------------------------------------------------------
# Modules: one per spec layer copy, parameters exactly as the planner counts
# --------------------------------------------------------------------------

def _rms_norm(x, weight, eps=1e-6):
    if hasattr(F, "rms_norm"):  # torch >= 2.4
        if weight is not None and x.dtype != weight.dtype:
            # Autocast leaves rms_norm alone; in fp32, as Hugging Face
            # normalizes, it keeps the fused kernel.
            x = x.to(weight.dtype)
        return F.rms_norm(x, (x.shape[-1],), weight, eps)
    # Older torch: Hugging Face's LlamaRMSNorm, computed in fp32.
    x32 = x.float()
    y = (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return y if weight is None else y * weight


class Norm(nn.Module):
    """LAYER and RMS normalize the last dim of [B, P, D]; BATCH and GROUP the
    channels of [B, C, *grid]. Running statistics are buffers, not parameters."""

    def __init__(self, f, device):
        super().__init__()
        self.kind, dim = f["kind"], f["dim"]
        affine = not f["no_affine"]
        with_bias = affine and not (self.kind == "RMS" or
                                    (self.kind == "LAYER" and f["no_bias"]))
        self.weight = nn.Parameter(torch.ones(dim, device=device)) if affine else None
        self.bias = nn.Parameter(torch.zeros(dim, device=device)) if with_bias else None
        if self.kind == "BATCH":
            self.register_buffer("running_mean", torch.zeros(dim, device=device))
            self.register_buffer("running_var", torch.ones(dim, device=device))
        # GroupNorm's usual 32 groups (diffusers, timm), or the largest
        # divisor of the channels below that.
        self.groups = max(g for g in range(1, 33) if dim % g == 0)

    def forward(self, x):
        if (self.weight is not None and x.dtype != self.weight.dtype
                and self.kind in ("LAYER", "GROUP") and x.device.type == "cpu"):
            # CUDA autocast runs these norms in fp32; CPU autocast (torch
            # 1.13) leaves a bf16 input that the fp32 weights reject.
            x = x.to(self.weight.dtype)
        if self.kind == "LAYER":
            return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias)
        if self.kind == "RMS":
            return _rms_norm(x, self.weight)
        if self.kind == "BATCH":
            return F.batch_norm(x, self.running_mean, self.running_var, self.weight,
                                self.bias, training=self.training)
        return F.group_norm(x, self.groups, self.weight, self.bias)


class Attention(nn.Module):
    """Multi-head attention with separate q, k, v and output projections
    (grouped-query when kv_heads < heads), as Hugging Face models build it."""

    def __init__(self, f, device):
        super().__init__()
        self.heads = f["heads"]
        self.kv_heads = f["kv_heads"] or f["heads"]
        self.head_dim = f["head_dim"] or f["hidden"] // f["heads"]
        self.window = f["window"]
        self.fused = f["fused"]
        kv_in = f["kv_input_dim"] or f["hidden"]
        inner, kv_inner = self.heads * self.head_dim, self.kv_heads * self.head_dim
        self.q = nn.Linear(f["hidden"], inner, bias=f["qkv_bias"], device=device)
        self.k = nn.Linear(kv_in, kv_inner, bias=f["qkv_bias"], device=device)
        self.v = nn.Linear(kv_in, kv_inner, bias=f["qkv_bias"], device=device)
        self.o = nn.Linear(inner, f["hidden"], bias=f["out_bias"], device=device)
        for target in ("q", "k", "v", "o"):
            getattr(self, target).headroom_target = target
        self.dropout = f["dropout"]
        if f["qk_norm"]:  # Qwen3: RMS norm on each q and k head
            self.q_norm = nn.Parameter(torch.ones(self.head_dim, device=device))
            self.k_norm = nn.Parameter(torch.ones(self.head_dim, device=device))
        else:
            self.q_norm = self.k_norm = None

    def _heads(self, x, heads, chunk):
        """[B, P, heads*hd] -> [B*n, heads, chunk, hd] with n = P / chunk;
        without a window (n = 1) a view, as Hugging Face's transpose(1, 2)."""
        b, p, _ = x.shape
        if chunk == p:
            return x.view(b, p, heads, self.head_dim).transpose(1, 2)
        x = x.view(b, p // chunk, chunk, heads, self.head_dim)
        return x.permute(0, 1, 3, 2, 4).reshape(b * (p // chunk), heads, chunk, self.head_dim)

    def forward(self, x, kv, mode):
        b, p, _ = x.shape
        q, k, v = self.q(x), self.k(kv), self.v(kv)
        if self.q_norm is not None:
            q = _rms_norm(q.unflatten(-1, (self.heads, self.head_dim)), self.q_norm).flatten(-2)
            k = _rms_norm(k.unflatten(-1, (self.kv_heads, self.head_dim)), self.k_norm).flatten(-2)
        # A window splits self-attention into blocks of `window` queries that
        # see the keys of their own block (Swin windows, Latte's per-frame
        # attention): heads x P x window scores, as the planner counts.
        chunk, padded = p, p
        if self.window and kv is x and self.window < p:
            chunk = self.window
            padded = -(-p // chunk) * chunk
            if padded != p:
                q, k, v = (F.pad(t, (0, 0, 0, padded - p)) for t in (q, k, v))
        kv_chunk = chunk if chunk != p else kv.shape[1]
        q = self._heads(q, self.heads, chunk)
        k = self._heads(k, self.kv_heads, kv_chunk)
        v = self._heads(v, self.kv_heads, kv_chunk)
        if self.kv_heads != self.heads:
            # Hugging Face's repeat_kv: copies each kv head for its query group.
            k = k.repeat_interleave(self.heads // self.kv_heads, dim=1)
            v = v.repeat_interleave(self.heads // self.kv_heads, dim=1)
        p_drop = self.dropout if self.training else 0.0
        if mode == "flash":
            out = _flash_attention(q, k, v, p_drop)
        elif mode == "sdpa":
            out = F.scaled_dot_product_attention(q, k, v, dropout_p=p_drop)
        else:
            # Eager attention: the heads x q x k score matrix is materialized
            # and softmax keeps its probabilities (and, with the spec's
            # attention dropout, the mask and dropped probabilities).
            scores = torch.matmul(q, k.transpose(-1, -2)) * (self.head_dim ** -0.5)
            probs = torch.softmax(scores, dim=-1)
            if p_drop:
                probs = F.dropout(probs, p=p_drop, training=True)
            out = torch.matmul(probs, v)
        if chunk == p:
            out = out.transpose(1, 2).reshape(b, p, self.heads * self.head_dim)
        else:
            n = padded // chunk
            out = out.view(b, n, self.heads, chunk, self.head_dim).permute(0, 1, 3, 2, 4)
            out = out.reshape(b, padded, self.heads * self.head_dim)[:, :p]
        return self.o(out)


def attention_mode(layer_fused, setup):
    """eager | sdpa | flash for one attention layer (the planner's
    FusedAttention): the setup's kernel, else the layer's `fused` flag (or
    the deprecated fused_attention); a fused layer on torch < 2.0 runs eager."""
    if setup.attention == "EAGER":
        return "eager"
    if setup.attention in ("SDPA", "FLASH"):
        return setup.attention.lower()
    return "sdpa" if (setup.fused_attention or layer_fused) and HAS_SDPA else "eager"


def _flash_attention(q, k, v, p_drop):
    """SDPA restricted to the FlashAttention-2 kernel."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel  # torch >= 2.3
        context = sdpa_kernel(SDPBackend.FLASH_ATTENTION)
    except ImportError:
        context = torch.backends.cuda.sdp_kernel(enable_flash=True, enable_math=False,
                                                 enable_mem_efficient=False)
    with context:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=p_drop)


class Mlp(nn.Module):
    """hidden -> ffn -> hidden; GELU, or SiLU-gated (SwiGLU) when gated."""

    def __init__(self, hidden, ffn, gated, bias, device):
        super().__init__()
        self.up = nn.Linear(hidden, ffn, bias=bias, device=device)
        self.gate = nn.Linear(hidden, ffn, bias=bias, device=device) if gated else None
        self.down = nn.Linear(ffn, hidden, bias=bias, device=device)
        for target in ("up", "gate", "down"):
            if getattr(self, target) is not None:
                getattr(self, target).headroom_target = target

    def forward(self, x):
        if self.gate is not None:
            return self.down(F.silu(self.gate(x)) * self.up(x))
        return self.down(F.gelu(self.up(x)))


class Moe(nn.Module):
    """Token-choice mixture of experts (Mixtral / DeepSeek style): a router,
    `experts` bias-free MLPs each token reaches top_k of, and shared experts
    every token uses. Experts run one at a time on their routed tokens, as
    Hugging Face's MixtralSparseMoeBlock does."""

    def __init__(self, f, device):
        super().__init__()
        self.top_k = f["top_k"]
        self.router = nn.Linear(f["hidden"], f["experts"], bias=f["router_bias"],
                                device=device)
        self.experts = nn.ModuleList(Mlp(f["hidden"], f["ffn"], f["gated"], False, device)
                                     for _ in range(f["experts"]))
        self.shared = nn.ModuleList(Mlp(f["hidden"], f["ffn"], f["gated"], False, device)
                                    for _ in range(f["shared_experts"]))

    def forward(self, x):
        b, p, h = x.shape
        flat = x.reshape(b * p, h)
        weights = torch.softmax(self.router(flat).float(), dim=-1)
        top_w, top_i = torch.topk(weights, self.top_k, dim=-1)
        top_w = (top_w / top_w.sum(-1, keepdim=True)).to(flat.dtype)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            token, slot = torch.nonzero(top_i == e, as_tuple=True)
            if token.numel() == 0:
                continue
            y = expert(flat[token]) * top_w[token, slot, None]
            out.index_add_(0, token, y.to(out.dtype))
        for expert in self.shared:
            out = out + expert(flat)
        return out.view(b, p, h)


class TiedLinear(nn.Module):
    """An output head whose weight is an embedding's table (counted once)."""

    def __init__(self, embedding, bias, device):
        super().__init__()
        self.weight = embedding.weight
        out_features = embedding.weight.shape[0]
        self.bias = nn.Parameter(torch.zeros(out_features, device=device)) if bias else None

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


class Parameters(nn.Module):
    """Free-standing parameters (class token, position table, a PReLU slope)."""

    def __init__(self, count, device):
        super().__init__()
        self.values = nn.Parameter(torch.empty(count, device=device))
        nn.init.normal_(self.values, std=0.02)


def _conv_module(f, device):
    dims = f["dims"] or 2
    kernel = tuple(f["kernel"] * dims if len(f["kernel"]) == 1 else f["kernel"])
    cls = {(1, False): nn.Conv1d, (2, False): nn.Conv2d, (3, False): nn.Conv3d,
           (1, True): nn.ConvTranspose1d, (2, True): nn.ConvTranspose2d,
           (3, True): nn.ConvTranspose3d}[(dims, f["transposed"])]
    # Stride and padding are set by the planner of the data flow, which knows
    # the input grid; they do not change the parameter count.
    return cls(f["in_channels"], f["out_channels"], kernel, groups=f["groups"] or 1,
               bias=f["bias"], device=device)


def _recurrent_module(f, device):
    cls = {"RNN": nn.RNN, "LSTM": nn.LSTM, "GRU": nn.GRU}[f["cell"]]
    return cls(f["input_size"], f["hidden"], num_layers=f["num_layers"] or 1,
               bias=not f["no_bias"], batch_first=True,
               bidirectional=f["bidirectional"], device=device)


class _Builder:
    """Builds the module tree; remembers embeddings for tied heads."""

    def __init__(self, device):
        self.device = device
        self.embeddings = []

    def layer(self, layer, frozen):
        frozen = frozen or layer.frozen
        copies = nn.ModuleList(self._one(layer, frozen) for _ in range(layer.repeat or 1))
        if frozen:
            copies.requires_grad_(False)
        return copies

    def _one(self, layer, frozen):
        f, d = layer.f, self.device
        if layer.kind == "embedding":
            module = nn.Embedding(f["num_embeddings"], f["dim"], device=d)
            self.embeddings.append(module)
            return module
        if layer.kind == "linear":
            if not f["tied"]:
                module = nn.Linear(f["in_features"], f["out_features"], bias=f["bias"], device=d)
                # The output head is neither adapted nor quantized (kHead).
                module.headroom_target = "" if f["logits"] else "linear"
                return module
            for embedding in reversed(self.embeddings):
                if tuple(embedding.weight.shape) == (f["out_features"], f["in_features"]):
                    return TiedLinear(embedding, f["bias"], d)
            raise SpecError(
                f"{layer.path}.linear.tied is set but no earlier embedding has "
                f"num_embeddings = {f['out_features']} (out_features) and dim = "
                f"{f['in_features']} (in_features) to share its weight with")
        if layer.kind == "norm":
            return Norm(f, d)
        if layer.kind == "attention":
            return Attention(f, d)
        if layer.kind == "mlp":
            return Mlp(f["hidden"], f["ffn"], f["gated"], f["bias"], d)
        if layer.kind == "moe":
            return Moe(f, d)
        if layer.kind == "conv":
            return _conv_module(f, d)
        if layer.kind == "recurrent":
            return _recurrent_module(f, d)
        if layer.kind == "parameters":
            return Parameters(f["count"], d)
        if layer.kind == "block":
            return nn.ModuleList(self.layer(child, frozen) for child in layer.children)
        return nn.Identity()  # elementwise: no parameters


class LoraLinear(nn.Module):
    """PEFT's LoRA Linear in plain PyTorch: the frozen base linear plus
    lora_B(lora_A(dropout(x))) * alpha / r, A [r, in] (Kaiming uniform) and
    B [out, r] (zeros) in fp32 (PEFT's default adapter dtype), the input cast
    to the adapter dtype and the sum cast back to the base's output dtype."""

    ALPHA = 8  # PEFT's LoraConfig default lora_alpha; no effect on memory

    def __init__(self, base, rank, dropout, device):
        super().__init__()
        self.base = base
        base.requires_grad_(False)
        in_features, out_features = _linear_shape(base)
        self.lora_A = nn.Linear(in_features, rank, bias=False, device=device,
                                dtype=torch.float32)
        self.lora_B = nn.Linear(rank, out_features, bias=False, device=device,
                                dtype=torch.float32)
        if device.type != "meta":
            nn.init.kaiming_uniform_(self.lora_A.weight, a=math.sqrt(5))
            nn.init.zeros_(self.lora_B.weight)
        for adapter in (self.lora_A, self.lora_B):
            adapter.weight.headroom_adapter = True
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.scaling = self.ALPHA / rank

    def forward(self, x):
        result = self.base(x)
        dtype = result.dtype
        x = x.to(self.lora_A.weight.dtype)
        result = result + self.lora_B(self.lora_A(self.dropout(x))) * self.scaling
        return result.to(dtype)


def _linear_shape(module):
    """(in_features, out_features) of an nn.Linear or a bitsandbytes one."""
    return module.in_features, module.out_features


def _targeted(modules):
    """(parent, child name, linear) for every linear the planner's rules
    call kLinear (param_tensors.cc): attention q, k, v, o, MLP and expert
    gate, up, down, standalone non-logits linears; never a head or router."""
    out = []
    for parent in modules.modules():
        for name, child in parent._modules.items():
            if isinstance(child, nn.Linear) and getattr(child, "headroom_target", ""):
                out.append((parent, name, child))
    return out


def _quantize_linear(linear, kind, device):
    """bitsandbytes' Linear4bit (NF4, double quantization, bf16 compute) or
    Linear8bitLt holding the frozen base weight; SpecError without it."""
    try:
        import bitsandbytes as bnb
    except ImportError as error:
        raise SpecError(f"setup.quant_base = {kind} needs bitsandbytes, which does not "
                        f"import here ({error})") from None
    if kind == "NF4":
        q = bnb.nn.Linear4bit(linear.in_features, linear.out_features,
                              bias=linear.bias is not None, compute_dtype=torch.bfloat16,
                              compress_statistics=True, quant_type="nf4")
        q.weight = bnb.nn.Params4bit(linear.weight.data.to("cpu"), requires_grad=False,
                                     compress_statistics=True, quant_type="nf4")
    else:
        q = bnb.nn.Linear8bitLt(linear.in_features, linear.out_features,
                                bias=linear.bias is not None, has_fp16_weights=False)
        q.weight = bnb.nn.Int8Params(linear.weight.data.to("cpu"), requires_grad=False,
                                     has_fp16_weights=False)
    if linear.bias is not None:
        q.bias = nn.Parameter(linear.bias.data.to("cpu"), requires_grad=False)
    q = q.to(device)  # quantizes on the way to the GPU
    q.headroom_target = linear.headroom_target
    return q


@dataclasses.dataclass
class BuiltModel:
    """The torch modules of a spec under a setup and the spec as trained
    (freeze applied: the planner's FrozenSpec)."""
    modules: nn.ModuleList
    spec: object
    quantized_params: int


def build_model(spec, device, setup=None, quantize=False):
    """The modules of the spec under the setup, as the planner applies it:
    freeze (train_last_blocks splits the last repeated block; named layers'
    weights frozen), LoRA (every base weight frozen, adapters on the
    targeted linears of layers that still run with gradient), the layers
    before the first that trains anything marked frozen (run without
    gradient). With quantize, the targeted base linears become bitsandbytes
    modules (QLoRA); the count of the weights that would be is always kept."""
    setup = setup or Setup()
    frozen_spec, weights_frozen = apply_freeze(spec, setup)
    builder = _Builder(device)
    modules = nn.ModuleList(builder.layer(layer, False) for layer in frozen_spec.layers)
    quantizing = setup.quant_base != "BASE_QUANT_UNSPECIFIED"
    quantized = sum(linear.weight.numel() for _, _, linear in _targeted(modules)) \
        if quantizing else 0
    for i, copies in enumerate(modules):
        if weights_frozen[i]:
            copies.requires_grad_(False)
    targets = lora_targets(setup)
    for i, copies in enumerate(modules):
        if not targets or frozen_spec.layers[i].frozen:
            continue
        for parent, name, linear in _targeted(copies):
            if linear.headroom_target not in targets:
                continue
            base = _quantize_linear(linear, setup.quant_base, device) \
                if quantizing and quantize else linear
            parent._modules[name] = LoraLinear(base, setup.lora_rank, setup.lora_dropout,
                                               device)
    if quantizing and quantize:  # base linears that are not adapted
        for parent, name, linear in _targeted(modules):
            parent._modules[name] = _quantize_linear(linear, setup.quant_base, device)
    if setup.freeze_layers or setup.lora_rank:
        layers = list(frozen_spec.layers)
        for i, copies in enumerate(modules):
            if any(p.requires_grad for p in copies.parameters()):
                break
            layers[i] = dataclasses.replace(layers[i], frozen=True)
            copies.requires_grad_(False)
        frozen_spec = Spec(name=frozen_spec.name, positions=frozen_spec.positions,
                           layers=layers)
    return BuiltModel(modules, frozen_spec, quantized)


def build_modules(spec, device, setup=None):
    """nn.ModuleList mirroring spec.layers: per layer a list of its `repeat`
    copies; a block copy is a list of its children. Frozen layers have
    requires_grad False."""
    return build_model(spec, device, setup).modules


def count_params(spec, setup=None):
    """The counts of the spec's torch model under the setup, built on meta:
    params (the base model, adapters excluded), trainable_params
    (requires_grad, adapters included), frozen_params, adapter_params and
    quantized_params (the base linear weights QLoRA would replace)."""
    built = build_model(spec, torch.device("meta"), setup)
    params = list(built.modules.parameters())  # shared (tied) parameters once
    adapter = [p for p in params if getattr(p, "headroom_adapter", False)]
    base = [p for p in params if not getattr(p, "headroom_adapter", False)]
    return {"params": sum(p.numel() for p in base),
            "trainable_params": sum(p.numel() for p in params if p.requires_grad),
            "frozen_params": sum(p.numel() for p in params if not p.requires_grad),
            "adapter_params": sum(p.numel() for p in adapter),
            "quantized_params": built.quantized_params}


# --------------------------------------------------------------------------
# The data flow: which tensor each layer reads, decided once from shapes
# --------------------------------------------------------------------------
#
# A spec is a list of layers, not a wired graph: towers, skips and residual
# adds are implied by shapes (DESIGN.md; memory_profile.cc reads it the same
# way, layer by layer). _Wiring below connects it with fixed rules, from
# per-sample shapes only, before anything runs:
#  - a layer reads the newest unread output whose shape is exactly what it
#    needs (an output that carries gradient first, so a trainable layer does
#    not read a frozen target network's output); else a model input of that
#    shape; else the newest output with as many values (a reshape: flatten,
#    patch merging); else the newest output adapted (see _plan_adapter);
#  - ADD adds the newest output to the residual of its block: the last ADD
#    output in the block, else the first input the block read of that shape;
#  - CONCAT joins the newest unread outputs, then the block's earlier inputs
#    of the same positions (U-Net skips), until it has dim values per position;
#  - cross attention (kv_positions or kv_input_dim set) reads its keys and
#    values from another output (an encoder's), which stays readable;
#  - every output nobody reads ends in the loss, so every parameter gets a
#    gradient and the optimizer keeps state for all of them.
# Tensors are freed after their last read, as Python frees a model's locals.


@dataclasses.dataclass(frozen=True)
class Shape:
    """Per-sample shape: "tokens" is [B, positions, width]; "spatial" is
    channels-first [B, width, *grid]. A tokens shape keeps the grid it came
    from (or None) so a later convolution can restore it."""
    layout: str
    positions: int
    width: int
    grid: tuple = None

    @property
    def numel(self):
        return self.positions * self.width


@dataclasses.dataclass
class Value:
    vid: int
    shape: Shape
    grad: bool            # carries gradient (not an input, not a frozen output)
    is_input: bool = False
    logits: bool = False
    make: tuple = None    # for inputs: ("float",) | ("ids", num) | ("targets", num)
    targets: int = None   # for logits: the vid of their class targets


@dataclasses.dataclass
class Op:
    kind: str             # layer kind, or elementwise op name
    name: str             # the spec path, for errors
    module: nn.Module
    reads: list           # [(vid, adapter steps)]
    out: int
    frozen: bool
    extra: dict


@dataclasses.dataclass
class Segment:
    """Ops run as one unit: under one activation checkpoint (a block copy, or
    one copy of a repeated layer), and/or as one FSDP wrapped unit (one copy
    of a top-level repeated layer, run through its _Unit module)."""
    ops: list
    ext: list = None      # vids read from outside, in order
    exports: list = None  # vids produced inside and needed later
    free_after: list = None
    checkpoint: bool = True
    # FSDP: (the layer's ModuleList of copies, copy index); the module there
    # (FSDP(_Unit) once wrapped) runs the segment, so its forward gathers the
    # unit's parameters.
    owner: tuple = None


def _prod(xs):
    return math.prod(xs) if xs else 1


def _factorizations(n, dims, limit=20000):
    """Ordered ways to write n as `dims` factors, squarest first."""
    def rec(m, k):
        if k == 1:
            yield (m,)
            return
        for a in _divisors(m):
            for rest in rec(m // a, k - 1):
                yield (a,) + rest
    out = list(itertools.islice(rec(n, dims), limit))
    return sorted(out, key=lambda g: (max(g) / min(g), g))


def _divisors(m):
    small = [d for d in range(1, math.isqrt(m) + 1) if m % d == 0]
    return small + [m // d for d in reversed(small) if d * d != m]


# (stride, padding, output_padding) per dim from the kernel size, the usual
# choices first; the first that turns the input grid into the layer's
# positions wins.
CONV_RULES = (
    lambda k: (1, (k - 1) // 2, 0),   # "same"
    lambda k: (1, 0, 0),              # "valid"
    lambda k: (k, 0, 0),              # patchify: stride = kernel
    lambda k: (2, (k - 1) // 2, 0),   # stride-2 downsample
    lambda k: (2, k // 2, 0),
    lambda k: (1, k // 2, 0),         # even kernel, padding k/2 (EEGNet)
)
TRANSPOSED_RULES = (
    lambda k: (k, 0, 0),              # unpatchify: stride = kernel
    lambda k: (2, max(k - 2, 0) // 2, 0),
    lambda k: (2, (k - 1) // 2, 1),
    lambda k: (1, (k - 1) // 2, 0),
)


def _conv_out(size, k, rule, transposed):
    stride, pad, out_pad = rule(k)
    if transposed:
        return (size - 1) * stride - 2 * pad + k + out_pad
    return (size + 2 * pad - k) // stride + 1 if size + 2 * pad >= k else 0


class _Scope:
    """A block copy (or the whole model): what ADD and CONCAT look back at."""

    def __init__(self):
        self.entries = []   # values its ops read, in order
        self.adds = []      # its ADD outputs


class _Wiring:
    """Decides, from shapes, which tensor every layer copy reads; yields the
    program's ops (with checkpoint segments) and the values the loss reads."""

    def __init__(self, spec, setup):
        self.spec = spec
        self.setup = setup
        self.values = []
        self.live = []       # outputs not read yet, oldest first
        self.contexts = []   # outputs read as cross-attention memory
        self.inputs = []     # model inputs (kept by the training loop anyway)
        self.scopes = [_Scope()]
        self.default_positions = setup.positions or spec.positions
        # The planner scales an attention's kv_positions with the setup's
        # positions when the layer inherits its positions (memory_profile.cc).
        self.position_scale = (setup.positions / spec.positions
                               if setup.positions and spec.positions else 1.0)

    # ---- values ----
    def _new(self, shape, grad, **kw):
        value = Value(len(self.values), shape, grad, **kw)
        self.values.append(value)
        return value

    def _output(self, shape, grad, **kw):
        value = self._new(shape, grad, **kw)
        self.live.append(value)
        return value

    def _input(self, shape, make):
        value = self._new(shape, False, is_input=True, make=make)
        self.inputs.append(value)
        return value

    def _consume(self, value, as_context=False):
        if value in self.live:
            self.live.remove(value)
            if as_context:
                self.contexts.append(value)
        self.scopes[-1].entries.append(value)

    def _pick(self, positions, width, trainable):
        """The value a layer reads (rules at the top of this section)."""
        pool = list(itertools.chain(reversed(self.live), reversed(self.contexts)))
        exact = [v for v in pool if (v.shape.positions, v.shape.width) == (positions, width)]
        if trainable:
            exact.sort(key=lambda v: not v.grad)  # stable: newest grad first
        if exact:
            return exact[0]
        for v in reversed(self.inputs):
            if (v.shape.positions, v.shape.width) == (positions, width) and v.make == ("float",):
                return v
        for v in pool:
            if v.shape.numel == positions * width and v in self.live:
                return v
        if self.live:
            return self.live[-1]
        if pool:
            return pool[0]
        floats = [v for v in self.inputs if v.make == ("float",)]
        return floats[-1] if floats else None

    # ---- adapters: parameter-free reshapes between what one layer makes and
    # what the next reads; each step is (name, args...) run by _apply_step.
    def _plan_adapter(self, src, positions, width, layout, grid=None):
        steps, cur = [], src.shape

        def to_tokens():
            nonlocal cur
            if cur.layout == "spatial":
                steps.append(("to_tokens",))
                cur = Shape("tokens", cur.positions, cur.width, cur.grid)

        def finish():
            nonlocal cur
            if layout == "tokens":
                to_tokens()
                return
            want = grid or (cur.grid if cur.grid and _prod(cur.grid) == cur.positions
                            else (cur.positions,))
            if cur.layout == "tokens":
                steps.append(("to_spatial", want))
            elif cur.grid != want:
                steps.append(("regrid", want))
            cur = Shape("spatial", cur.positions, cur.width, want)

        if (cur.positions, cur.width) == (positions, width):
            finish()
            return steps, cur
        if cur.numel == positions * width:
            to_tokens()
            steps.append(("reshape", positions, width))
            cur = Shape("tokens", positions, width, None)
            finish()
            return steps, cur
        if (layout == "spatial" and cur.width == width and grid and cur.grid
                and len(cur.grid) == len(grid)):
            # Same channels on another grid: nearest upsampling (a U-Net
            # decoder) or average pooling.
            if cur.layout == "tokens":
                steps.append(("to_spatial", cur.grid))
            steps.append(("resize", grid))
            cur = Shape("spatial", positions, width, grid)
            return steps, cur
        if cur.layout == "spatial" and cur.positions == positions and layout == "spatial":
            # A feature map with more or fewer channels than the layer takes.
            if cur.width > width:
                steps.append(("take_channels", width))
            else:
                steps.append(("pad_channels", width - cur.width))
            cur = Shape("spatial", positions, width, cur.grid)
            finish()
            return steps, cur
        to_tokens()
        if positions == 1 and cur.positions != 1:
            # A per-sample vector: flatten (a CLS token when width fits).
            steps.append(("flatten",))
            cur = Shape("tokens", 1, cur.numel, None)
        elif cur.positions > positions:
            steps.append(("take_positions", positions))
        elif cur.positions < positions and positions % cur.positions == 0:
            steps.append(("repeat_positions", positions // cur.positions))
        elif cur.positions < positions:
            steps.append(("pad_positions", positions - cur.positions))
        keep_grid = cur.grid if cur.positions == positions else None
        if cur.width > width:
            steps.append(("take_width", width))
        elif cur.width < width:
            steps.append(("pad_width", width - cur.width))
        cur = Shape("tokens", positions, width, keep_grid)
        finish()
        return steps, cur

    def _read(self, positions, width, layout, trainable, grid=None):
        """Picks the value a layer reads and plans its adapter: returns the
        read (vid, steps) and the shape the layer sees."""
        src = self._pick(positions, width, trainable)
        if layout == "any":  # keep the source's layout when shapes agree
            same = src is not None and (src.shape.positions, src.shape.width) == (positions, width)
            layout = src.shape.layout if same else "tokens"
            grid = src.shape.grid if same else None
        if src is None:  # the model's first layer: a synthetic input
            shape = Shape(layout, positions, width, grid if layout == "spatial" else None)
            if layout == "spatial" and grid is None:
                shape = Shape("spatial", positions, width, (positions,))
            src = self._input(shape, ("float",))
        self._consume(src)
        steps, shape = self._plan_adapter(src, positions, width, layout, grid)
        return (src.vid, steps), shape

    # ---- layers ----
    def plan(self, modules, checkpointing, fsdp_units=False):
        ops = []
        self._layers(self.spec.layers, modules, self.default_positions, False,
                     checkpointing, ops, fsdp_units)
        final = list(self.live)
        return ops, final

    def _layers(self, layers, modules, positions, frozen, checkpointing, ops,
                fsdp_units=False):
        for layer, copies in zip(layers, modules):
            p = layer.positions or positions
            is_frozen = frozen or layer.frozen
            repeat = layer.repeat or 1
            # Checkpoint each block copy and each copy of a repeated layer
            # (what the planner's checkpointing assumes), outermost only.
            ckpt = checkpointing and not is_frozen and (layer.kind == "block" or repeat > 1)
            # FSDP wraps each copy of a top-level repeated layer (the
            # planner's SplitParams: those are the units, the rest is root).
            unit = fsdp_units and repeat > 1
            for j, module in enumerate(copies):
                target = []
                if layer.kind == "block":
                    self._block(layer, module, p, is_frozen, checkpointing and not ckpt,
                                target)
                else:
                    self._layer(layer, module, p, is_frozen, target)
                if ckpt or unit:
                    ops.append(Segment(target, checkpoint=ckpt,
                                       owner=(copies, j) if unit else None))
                else:
                    ops.extend(target)

    def _block(self, layer, module, p, frozen, checkpointing, ops):
        first_new = len(self.values)
        self.scopes.append(_Scope())
        self._layers(layer.children, module, p, frozen, checkpointing, ops)
        scope = self.scopes.pop()
        # What a block copy read from before it, other than the stream it
        # replaces (a DiT block's class embedding), the next copy reads too.
        out = self.live[-1].shape if self.live else None
        for v in scope.entries:
            if (v.vid < first_new and not v.is_input and v not in self.contexts
                    and (out is None or (v.shape.positions, v.shape.width)
                         != (out.positions, out.width))):
                self.contexts.append(v)

    def _layer(self, layer, module, p, frozen, ops):
        f, trainable = layer.f, not frozen
        extra = {}
        if layer.kind == "embedding":
            lookups = f["lookups"] or 1
            ids = self._input(Shape("tokens", p, lookups, None), ("ids", f["num_embeddings"]))
            reads = [(ids.vid, [])]
            out = Shape("tokens", p, f["dim"], None)
        elif layer.kind == "linear":
            read, shape = self._read(p, f["in_features"], "tokens", trainable)
            reads = [read]
            out = Shape("tokens", p, f["out_features"], shape.grid)
        elif layer.kind == "norm":
            layout = "tokens" if f["kind"] in ("LAYER", "RMS") else "spatial"
            read, shape = self._read(p, f["dim"], layout, trainable)
            reads, out = [read], shape
        elif layer.kind == "attention":
            reads, out = self._attention(layer, p, trainable, extra)
        elif layer.kind in ("mlp", "moe"):
            read, shape = self._read(p, f["hidden"], "tokens", trainable)
            reads, out = [read], shape
        elif layer.kind == "conv":
            reads, out = self._conv(layer, module, p, trainable)
        elif layer.kind == "recurrent":
            read, shape = self._read(p, f["input_size"], "tokens", trainable)
            dirs = 2 if f["bidirectional"] else 1
            reads, out = [read], Shape("tokens", p, dirs * f["hidden"], shape.grid)
        elif layer.kind == "parameters":
            reads, out = self._parameters(layer, extra)
        else:
            reads, out = self._elementwise(layer, p, trainable, extra)
        # An output carries gradient when its layer trains and has
        # parameters or reads something that carries gradient.
        grad = not frozen and (any(q.requires_grad for q in module.parameters())
                               or any(self.values[vid].grad for vid, _ in reads))
        value = self._output(out, grad, logits=layer.kind == "linear" and f["logits"])
        if value.logits:
            value.targets = self._input(Shape("tokens", p, 1, None),
                                        ("targets", f["out_features"])).vid
            extra["targets"] = value.targets
        kind = f["op"] if layer.kind == "elementwise" else layer.kind
        ops.append(Op(kind, layer.path, module, reads, value.vid, frozen, extra))
        if kind == "ADD":
            self.scopes[-1].adds.append(value)

    def _attention(self, layer, p, trainable, extra):
        f = layer.f
        read, shape = self._read(p, f["hidden"], "tokens", trainable)
        if not (f["kv_positions"] or f["kv_input_dim"]):
            return [read], Shape("tokens", p, f["hidden"], shape.grid)
        kv_p = f["kv_positions"] or p
        if f["kv_positions"] and not layer.positions:
            kv_p = max(1, round(f["kv_positions"] * self.position_scale))
        kv_in = f["kv_input_dim"] or f["hidden"]
        exact = [v for v in itertools.chain(reversed(self.live), reversed(self.contexts),
                                            reversed(self.inputs))
                 if (v.shape.positions, v.shape.width) == (kv_p, kv_in)
                 and v.vid != read[0] and v.make in (None, ("float",))]
        if exact:
            # Cross attention: keys and values from another output (an
            # encoder's), which stays readable for later layers.
            src = exact[0]
            self._consume(src, as_context=True)
            steps, _ = self._plan_adapter(src, kv_p, kv_in, "tokens")
            kv_read = (src.vid, steps)
        else:
            src = self.values[read[0]]
            steps, _ = self._plan_adapter(src, kv_p, kv_in, "tokens")
            kv_read = (src.vid, steps)
        extra["cross"] = True
        return [read, kv_read], Shape("tokens", p, f["hidden"], shape.grid)

    def _conv(self, layer, module, p, trainable):
        f = layer.f
        dims = f["dims"] or 2
        kernel = module.kernel_size
        in_p = f["in_positions"] or p
        src = self._pick(in_p, f["in_channels"], trainable)
        # The input grid: the source's own (or it scaled evenly, as a
        # decoder upsamples), else the squarest factorization that works.
        grids = []
        if src is not None and src.shape.grid and len(src.shape.grid) == dims:
            scaled = _scaled_grid(src.shape.grid, in_p)
            if scaled:
                grids.append(scaled)
        grids += [g for g in _factorizations(in_p, dims) if g not in grids]
        rules = TRANSPOSED_RULES if f["transposed"] else CONV_RULES
        for grid in grids:
            for rule in rules:
                out = tuple(_conv_out(s, k, rule, f["transposed"]) for s, k in zip(grid, kernel))
                if min(out) >= 1 and _prod(out) == p:
                    geometry = [rule(k) for k in kernel]
                    module.stride = tuple(g[0] for g in geometry)
                    module.padding = tuple(g[1] for g in geometry)
                    if f["transposed"]:
                        module.output_padding = tuple(g[2] for g in geometry)
                    read, _ = self._read(in_p, f["in_channels"], "spatial", trainable, grid=grid)
                    return [read], Shape("spatial", p, f["out_channels"], out)
        raise SpecError(
            f"{layer.path}.conv: no usual stride and padding take in_positions = {in_p} "
            f"to positions = {p} with kernel {list(kernel)} in {dims} dims")

    def _parameters(self, layer, extra):
        # The spec gives a count, not a shape: the values join the newest
        # output the way such tensors do (a position table added per
        # position, a per-channel vector added everywhere, a single slope
        # scaling), so they train like the model's own.
        if not self.live:
            extra["mode"] = "alone"
            return [], Shape("tokens", 1, layer.f["count"], None)
        src = self.live[-1]
        self._consume(src)
        steps, shape = self._plan_adapter(src, src.shape.positions, src.shape.width, "tokens")
        count, width = layer.f["count"], shape.width
        if count == 1:
            extra["mode"] = "scale"
        elif count % width == 0 and count // width >= shape.positions:
            extra["mode"] = "table"
        elif count == width:
            extra["mode"] = "vector"
        else:
            extra["mode"] = "mean"
        return [(src.vid, steps)], shape

    def _elementwise(self, layer, p, trainable, extra):
        op, dim = layer.f["op"], layer.f["dim"]
        extra["name"] = layer.name
        if op in ("ACTIVATION", "DROPOUT"):
            read, shape = self._read(p, dim, "any", trainable)
            return [read], shape
        if op == "SOFTMAX":
            read, shape = self._read(p, dim, "tokens", trainable)
            return [read], shape
        if op == "ADD":
            return self._add(p, dim, trainable)
        if op == "CONCAT":
            return self._concat(p, dim, extra)
        return self._pool(p, dim, trainable, extra)

    def _add(self, p, dim, trainable):
        read, shape = self._read(p, dim, "any", trainable)
        a = read[0]
        same = lambda v: (v.shape.positions, v.shape.width) == (p, dim) and v.vid != a
        scope = self.scopes[-1]
        partner = (next((v for v in reversed(scope.adds) if same(v)), None)
                   or next((v for v in scope.entries
                            if same(v) and v.make in (None, ("float",))), None)
                   or next((v for v in reversed(self.live) if same(v)), None)
                   or next((v for v in reversed(self.inputs)
                            if same(v) and v.make == ("float",)), None))
        if partner is None:
            return [read], shape  # nothing to add: the sum of the value with itself
        if partner in self.live:
            self.live.remove(partner)
        steps, _ = self._plan_adapter(partner, p, dim, shape.layout, shape.grid)
        return [read, (partner.vid, steps)], shape

    def _concat(self, p, dim, extra):
        need, parts, total = p * dim, [], 0
        for v in reversed(list(self.live)):
            if total >= need:
                break
            parts.append(v)
            total += v.shape.numel
        if total < need:
            # Skip connections: the block's earlier inputs at these positions.
            for v in reversed(self.scopes[-1].entries):
                if total >= need:
                    break
                if (v.shape.positions == p and v not in parts
                        and v.make in (None, ("float",))):
                    parts.append(v)
                    total += v.shape.numel
        if not parts:
            floats = [v for v in self.inputs if v.make == ("float",)]
            parts = floats[-1:]
        parts.reverse()  # oldest first, as torch.cat([a, b]) is written
        for v in parts:
            self._consume(v)
        if parts and all(v.shape.positions == p for v in parts):
            spatial = all(v.shape.layout == "spatial" and v.shape.grid == parts[0].shape.grid
                          for v in parts)
            layout = "spatial" if spatial else "tokens"
            reads = [(v.vid, self._plan_adapter(v, p, v.shape.width, layout,
                                                parts[0].shape.grid if spatial else None)[0])
                     for v in parts]
            extra["join"] = "width"
            extra["layout"] = layout
            grid = parts[0].shape.grid
        elif parts and all(v.shape.width == dim for v in parts):
            reads = [(v.vid, self._plan_adapter(v, v.shape.positions, dim, "tokens")[0])
                     for v in parts]
            extra["join"] = "positions"
            layout, grid = "tokens", None
        else:
            reads = [(v.vid, self._plan_adapter(v, 1, v.shape.numel, "tokens")[0])
                     for v in parts]
            extra["join"] = "flat"
            layout, grid = "tokens", None
        extra["fit"] = (p, dim)
        return reads, Shape(layout, p, dim, grid if layout == "spatial" else None)

    def _pool(self, p, dim, trainable, extra):
        src = next((v for v in reversed(self.live) if v.shape.width == dim), None)
        src = src or self._pick(p, dim, trainable)
        if src is None or src.shape.numel <= p * dim:
            read, shape = self._read(p, dim, "tokens", trainable)
            extra["pool"] = ("none",)
            return [read], shape
        self._consume(src)
        s = src.shape
        if s.width != dim or s.positions <= p:
            # Mismatched width (a dot-product score): pool the flattened
            # values down to p x dim.
            steps, _ = self._plan_adapter(src, 1, s.numel, "tokens")
            extra["pool"] = ("flat", p, dim)
            return [(src.vid, steps)], Shape("tokens", p, dim, None)
        if s.layout == "spatial" and s.grid:
            grid = _pool_grid(s.grid, p)
            if grid:
                # Spatial pooling in a conv net: max pooling, the CNN default.
                extra["pool"] = ("max", grid)
                return [(src.vid, [])], Shape("spatial", p, dim, grid)
        steps, _ = self._plan_adapter(src, s.positions, dim, "tokens")
        # Pooling tokens (a ViT head, a mean over a history): the mean.
        extra["pool"] = ("mean", p)
        return [(src.vid, steps)], Shape("tokens", p, dim, None)


def _scaled_grid(grid, positions):
    """`grid` with every dim > 1 multiplied (or divided) by one integer so
    that it holds `positions`, or None."""
    if _prod(grid) == positions:
        return tuple(grid)
    big = [s for s in grid if s > 1]
    if not big:
        return None
    ratio = (positions / _prod(grid)) ** (1 / len(big))
    for r in (ratio, 1 / ratio):
        k = round(r)
        if k >= 2 and abs(r - k) < 1e-6:
            out = tuple((s * k if r is ratio else s // k) if s > 1 else 1 for s in grid)
            if _prod(out) == positions:
                return out
    return None


def _pool_grid(grid, positions):
    """The grid of an even pooling of `grid` down to `positions`, or None."""
    big = [s for s in grid if s > 1]
    if not big:
        return None
    k0 = round((_prod(grid) / positions) ** (1 / len(big)))
    for k in (k0, k0 - 1, k0 + 1):
        if k >= 1:
            out = tuple(s // k if s > 1 else 1 for s in grid)
            if _prod(out) == positions and min(out) >= 1:
                return out
    return None


def _liveness(units, keep):
    """For each unit, the vids whose last read is that unit (to free after
    it); vids in `keep` are never freed."""
    last = {}
    for i, unit in enumerate(units):
        for vid in _unit_reads(unit):
            last[vid] = i
    free = [[] for _ in units]
    for vid, i in last.items():
        if vid not in keep:
            free[i].append(vid)
    return free


def _unit_reads(unit):
    if isinstance(unit, Segment):
        return unit.ext
    reads = [vid for vid, _ in unit.reads]
    if "targets" in unit.extra:
        reads.append(unit.extra["targets"])
    return reads


def _finish_segments(units, final):
    """Fills each segment's external reads, exports and free lists."""
    later_reads = {v.vid for v in final}
    for unit in reversed(units):
        if isinstance(unit, Segment):
            made = {op.out for op in unit.ops}
            reads = []
            for op in unit.ops:
                for vid in _unit_reads(op):
                    if vid not in made and vid not in reads:
                        reads.append(vid)
            unit.ext = reads
            unit.exports = [op.out for op in unit.ops if op.out in later_reads]
            unit.free_after = _liveness(unit.ops, set(unit.exports) | set(unit.ext))
        later_reads.update(_unit_reads(unit))


# --------------------------------------------------------------------------
# The program: modules + data flow, one training step's forward and loss
# --------------------------------------------------------------------------

def _activation(name):
    """The activation a layer's name says (relu1, quick_gelu, silu_gate...);
    GELU when it says none."""
    n = name.lower()
    if "quick_gelu" in n:
        return lambda x: x * torch.sigmoid(1.702 * x)
    for key, fn in (("gelu", F.gelu), ("silu", F.silu), ("swish", F.silu),
                    ("relu", F.relu), ("elu", F.elu),
                    ("tanh", torch.tanh), ("sigmoid", torch.sigmoid),
                    ("l2norm", lambda x: F.normalize(x, dim=-1))):
        if key in n:
            return fn
    return F.gelu


def _apply_step(t, step):
    name, b = step[0], t.shape[0]
    if name == "to_tokens":
        return t.flatten(2).transpose(1, 2)
    if name == "to_spatial":
        return t.transpose(1, 2).reshape(b, t.shape[2], *step[1])
    if name == "regrid":
        return t.reshape(b, t.shape[1], *step[1])
    if name == "reshape":
        return t.reshape(b, step[1], step[2])
    if name == "flatten":
        return t.reshape(b, 1, -1)
    # Slices are copied: a layer that saves its input would otherwise keep
    # the whole sliced tensor alive until backward.
    if name == "take_positions":
        return t[:, :step[1]].contiguous()
    if name == "repeat_positions":
        return t.repeat_interleave(step[1], dim=1)
    if name == "pad_positions":
        return F.pad(t, (0, 0, 0, step[1]))
    if name == "take_width":
        return t[..., :step[1]].contiguous()
    if name == "pad_width":
        return F.pad(t, (0, step[1]))
    if name == "take_channels":
        return t[:, :step[1]].contiguous()
    if name == "pad_channels":
        return F.pad(t, [0, 0] * (t.dim() - 2) + [0, step[1]])
    if name == "resize":
        grid = step[1]
        if _prod(grid) >= _prod(t.shape[2:]):
            return F.interpolate(t, size=grid, mode="nearest")
        return {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d,
                3: F.adaptive_avg_pool3d}[len(grid)](t, grid)
    raise AssertionError(name)


class _Unit(nn.Module):
    """One FSDP wrapped unit: a copy of a top-level repeated layer. Its
    forward runs that copy's ops (the Program's segment function), so FSDP's
    pre-forward gathers exactly this copy's parameters around them."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, run, checkpoint, *tensors):
        if checkpoint:
            return torch_checkpoint.checkpoint(run, *tensors, use_reentrant=False)
        return run(*tensors)


class Program(nn.Module):
    """The spec's model on a device: forward(data) returns the step's loss.
    With fsdp_units each copy of a top-level repeated layer sits in a _Unit
    (for FSDP's auto-wrap policy) and runs through it."""

    def __init__(self, spec, setup, device, quantize=False, fsdp_units=False):
        super().__init__()
        built = build_model(spec, device, setup, quantize)
        self.layers = built.modules
        spec = built.spec  # freeze applied
        wiring = _Wiring(spec, setup)
        self.units, self.final = wiring.plan(self.layers, setup.activation_checkpointing,
                                             fsdp_units)
        if fsdp_units:
            # After planning: the ops keep the leaf modules, which stay the
            # same objects inside the _Unit (and inside FSDP's wrapper).
            for copies, layer in zip(self.layers, spec.layers):
                if (layer.repeat or 1) > 1:
                    for j in range(len(copies)):
                        copies[j] = _Unit(copies[j])
        self.values = wiring.values
        _finish_segments(self.units, self.final)
        keep = {v.vid for v in self.final} | {v.vid for v in wiring.inputs}
        self.free_after = _liveness(self.units, keep)
        self.inputs = wiring.inputs
        self.setup = setup
        self.input_dtype = torch.float32

    def to_true_half(self, dtype):
        """model.to(dtype) for the base model, as bf16-true / fp16-true
        training does; LoRA adapters stay fp32 (PEFT's default) and
        bitsandbytes' quantized weights stay as they are."""
        for module in self.modules():
            if isinstance(module, LoraLinear):
                continue
            for name, param in module._parameters.items():
                if (param is not None and param.is_floating_point()
                        and not getattr(param, "headroom_adapter", False)
                        and type(param) is nn.Parameter):
                    module._parameters[name] = nn.Parameter(param.data.to(dtype),
                                                            requires_grad=param.requires_grad)
            for name, buf in module._buffers.items():
                if buf is not None and buf.is_floating_point():
                    module._buffers[name] = buf.to(dtype)
        self.input_dtype = dtype

    def make_batch(self, batch, device):
        """Synthetic inputs: random floats, token ids and loss targets."""
        data = {}
        for v in self.inputs:
            s = v.shape
            if v.make[0] == "float":
                shape = ((batch, s.width) + tuple(s.grid) if s.layout == "spatial"
                         else (batch, s.positions, s.width))
                data[v.vid] = torch.randn(shape, device=device, dtype=self.input_dtype)
            elif v.make[0] == "ids":
                shape = (batch, s.positions) if s.width == 1 else (batch, s.positions, s.width)
                data[v.vid] = torch.randint(0, v.make[1], shape, device=device)
            else:
                data[v.vid] = torch.randint(0, v.make[1], (batch * s.positions,), device=device)
        return data

    def forward(self, data):
        env = dict(data)
        for unit, free in zip(self.units, self.free_after):
            if isinstance(unit, Segment):
                run, args = self._segment_fn(unit), [env[v] for v in unit.ext]
                if unit.owner is not None:
                    copies, j = unit.owner
                    outs = copies[j](run, unit.checkpoint, *args)
                elif unit.checkpoint:
                    outs = torch_checkpoint.checkpoint(run, *args, use_reentrant=False)
                else:
                    outs = run(*args)
                env.update(zip(unit.exports, outs))
            else:
                env[unit.out] = self._run(unit, env)
            for vid in free:
                del env[vid]
        loss = None
        for v in self.final:
            t = env[v.vid]
            if v.logits:
                logits = t.reshape(-1, t.shape[-1]).float()
                term = F.cross_entropy(logits, env[v.targets])
            else:
                term = t.float().mean()
            loss = term if loss is None else loss + term
        return loss

    def _segment_fn(self, segment):
        def run(*tensors):
            env = dict(zip(segment.ext, tensors))
            for op, free in zip(segment.ops, segment.free_after):
                env[op.out] = self._run(op, env)
                for vid in free:
                    del env[vid]
            return tuple(env[v] for v in segment.exports)
        return run

    def _run(self, op, env):
        args = []
        for vid, steps in op.reads:
            t = env[vid]
            for step in steps:
                t = _apply_step(t, step)
            args.append(t)
        if op.frozen:
            with torch.no_grad():
                return self._compute(op, args)
        return self._compute(op, args)

    def _compute(self, op, args):
        m, kind, extra = op.module, op.kind, op.extra
        if kind in ("linear", "norm", "mlp", "moe", "conv"):
            return m(args[0])
        if kind == "embedding":
            out = m(args[0])
            return out.sum(dim=2) if out.dim() == 4 else out
        if kind == "attention":
            x = args[0]
            return m(x, args[1] if extra.get("cross") else x,
                     attention_mode(m.fused, self.setup))
        if kind == "recurrent":
            return m(args[0])[0]
        if kind == "parameters":
            w, mode = m.values, extra["mode"]
            if mode == "alone":
                return w.view(1, 1, -1).expand(1, 1, -1)
            x = args[0]
            if mode == "scale":
                return x * w
            if mode == "table":
                return x + w.view(-1, x.shape[-1])[: x.shape[1]]
            if mode == "vector":
                return x + w
            return x + w.mean()
        if kind == "ACTIVATION":
            return _activation(extra["name"])(args[0])
        if kind == "DROPOUT":
            return F.dropout(args[0], p=0.1, training=True)
        if kind == "SOFTMAX":
            return torch.softmax(args[0], dim=-1)
        if kind == "ADD":
            return args[0] + (args[1] if len(args) > 1 else args[0])
        if kind == "CONCAT":
            return self._concat(args, extra)
        return self._pool(args[0], extra["pool"])

    @staticmethod
    def _concat(args, extra):
        p, dim = extra["fit"]
        b = args[0].shape[0]
        if extra["join"] == "width":
            # Channels of a feature map (a U-Net skip) or features of tokens.
            axis = 1 if extra["layout"] == "spatial" else 2
            out = torch.cat(args, dim=axis) if len(args) > 1 else args[0]
            have = out.shape[axis]
            if have > dim:
                out = out.narrow(axis, 0, dim)
            elif have < dim:
                out = F.pad(out, [0, 0] * (out.dim() - 1 - axis) + [0, dim - have])
            return out
        if extra["join"] == "positions":
            out = torch.cat(args, dim=1) if len(args) > 1 else args[0]
        else:
            out = torch.cat([a.reshape(b, -1) for a in args], dim=1)
        out = out.reshape(b, -1)
        if out.shape[1] > p * dim:
            out = out[:, : p * dim]
        elif out.shape[1] < p * dim:
            out = F.pad(out, (0, p * dim - out.shape[1]))
        return out.reshape(b, p, dim)

    @staticmethod
    def _pool(x, pool):
        if pool[0] == "none":
            return x
        if pool[0] == "max":
            grid = pool[1]
            return {1: F.adaptive_max_pool1d, 2: F.adaptive_max_pool2d,
                    3: F.adaptive_max_pool3d}[len(grid)](x, grid)
        if pool[0] == "mean":
            if pool[1] == 1:
                return x.mean(dim=1, keepdim=True)
            return F.adaptive_avg_pool1d(x.transpose(1, 2), pool[1]).transpose(1, 2)
        _, p, dim = pool
        b = x.shape[0]
        return F.adaptive_avg_pool1d(x.reshape(b, 1, -1), p * dim).reshape(b, p, dim)


# --------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------

# Under torch.distributed only rank 0 prints (main sets this False on the
# other ranks), so the worker reads one line per event.
_EMITS = [True]


def _emit(obj):
    if _EMITS[0]:
        print(json.dumps(obj), flush=True)


def _is_oom(error):
    oom_type = getattr(torch.cuda, "OutOfMemoryError", None)
    if oom_type is not None and isinstance(error, oom_type):
        return True
    return isinstance(error, RuntimeError) and "out of memory" in str(error).lower()


def _batch_outcome(measure, prefix=""):
    """Runs one batch's measurement: (oom, error). A failure is the batch's
    result, never a crash; `prefix` starts any error but an OOM."""
    try:
        measure()
    except Exception as e:
        oom = _is_oom(e)
        return oom, "" if oom else f"{prefix}{type(e).__name__}: {e}"
    return False, ""


def _cuda_peaks(device):
    """After a batch: the allocator's peaks (allocated, reserved bytes); its
    cache is emptied for the next batch."""
    torch.cuda.synchronize(device)
    peaks = (torch.cuda.max_memory_allocated(device),
             torch.cuda.max_memory_reserved(device))
    torch.cuda.empty_cache()
    return peaks


def _mean_step_seconds(record, ok):
    """The mean timed step of a batch that succeeded; None otherwise."""
    return sum(record.seconds) / len(record.seconds) if ok and record.seconds else None


def _autocast_enabled(device_type):
    # torch < 2.4 has only the per-device functions; it switches CPU autocast
    # off (with a warning) for a dtype it does not support.
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:
        return (torch.is_autocast_cpu_enabled() if device_type == "cpu"
                else torch.is_autocast_enabled())


def _torch_at_least(major, minor):
    parts = re.findall(r"[0-9]+", torch.__version__)[:2]
    return (int(parts[0]), int(parts[1])) >= (major, minor)


class Lion(torch.optim.Optimizer):
    """Lion (Chen et al. 2023) in plain PyTorch: one momentum in the
    parameter dtype; update = sign(beta1*m + (1-beta1)*g), then
    m = beta2*m + (1-beta2)*g; decoupled weight decay. One tensor at a time."""

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                m = state["exp_avg"]
                if group["weight_decay"]:
                    p.mul_(1 - group["lr"] * group["weight_decay"])
                update = m.mul(beta1).add_(p.grad, alpha=1 - beta1).sign_()
                p.add_(update, alpha=-group["lr"])
                m.mul_(beta2).add_(p.grad, alpha=1 - beta2)
        return None


class HarnessAdafactor(torch.optim.Optimizer):
    """transformers' Adafactor algorithm with its defaults (scale_parameter,
    relative_step, beta1 None, eps (1e-30, 1e-3), clip_threshold 1.0,
    decay_rate -0.8), used when transformers does not import: a factored
    fp32 second moment (row and column means) for tensors of two or more
    dimensions, a full one for vectors, no first moment; one tensor at a
    time, in fp32 for a 16-bit parameter."""

    def __init__(self, params, eps=(1e-30, 1e-3), clip_threshold=1.0, decay_rate=-0.8):
        super().__init__(params, dict(eps=eps, clip_threshold=clip_threshold,
                                      decay_rate=decay_rate))

    @staticmethod
    def _rms(t):
        return t.norm(2) / (t.numel() ** 0.5)

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            eps1, eps2 = group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad.float()
                state = self.state[p]
                factored = grad.dim() >= 2
                if not state:
                    state["step"] = 0
                    if factored:
                        state["exp_avg_sq_row"] = torch.zeros(grad.shape[:-1], device=p.device)
                        state["exp_avg_sq_col"] = torch.zeros(grad.shape[:-2] + grad.shape[-1:],
                                                              device=p.device)
                    else:
                        state["exp_avg_sq"] = torch.zeros_like(grad)
                    state["RMS"] = 0
                state["step"] += 1
                p32 = p.float() if p.dtype != torch.float32 else p
                state["RMS"] = float(self._rms(p32))
                lr = min(1e-2, 1.0 / math.sqrt(state["step"])) * max(eps2, state["RMS"])
                beta2t = 1.0 - math.pow(state["step"], group["decay_rate"])
                update = grad ** 2 + eps1
                if factored:
                    row, col = state["exp_avg_sq_row"], state["exp_avg_sq_col"]
                    row.mul_(beta2t).add_(update.mean(dim=-1), alpha=1.0 - beta2t)
                    col.mul_(beta2t).add_(update.mean(dim=-2), alpha=1.0 - beta2t)
                    r = (row / row.mean(dim=-1, keepdim=True)).rsqrt_().unsqueeze(-1)
                    c = col.unsqueeze(-2).rsqrt()
                    update = torch.mul(r, c).mul_(grad)
                else:
                    sq = state["exp_avg_sq"]
                    sq.mul_(beta2t).add_(update, alpha=1.0 - beta2t)
                    update = sq.rsqrt().mul_(grad)
                update.div_((self._rms(update) / group["clip_threshold"]).clamp_(min=1.0))
                update.mul_(lr)
                p32.add_(-update)
                if p32 is not p:
                    p.copy_(p32)
        return None


def optimizer_impl(setup, device):
    """What implements the setup's optimizer here (said in every result),
    or SpecError when nothing can (a failure record)."""
    name = setup.optimizer
    if name == "ADAMW_FUSED":
        if device.type != "cuda":
            raise SpecError("setup.optimizer = ADAMW_FUSED: torch.optim.AdamW(fused=True) "
                            "runs on CUDA only")
        if not _torch_at_least(2, 0):
            raise SpecError("setup.optimizer = ADAMW_FUSED needs torch >= 2.0 "
                            f"(AdamW fused=True), found {torch.__version__}")
        return "torch.optim.AdamW(fused=True)"
    if name in ("ADAM8BIT", "PAGED_ADAMW8BIT"):
        try:
            import bitsandbytes  # noqa: F401
        except ImportError as error:
            raise SpecError(f"setup.optimizer = {name} needs bitsandbytes, which does not "
                            f"import here ({error})") from None
        return ("bitsandbytes.optim.Adam8bit" if name == "ADAM8BIT"
                else "bitsandbytes.optim.PagedAdamW8bit")
    if name == "ADAFACTOR":
        try:
            from transformers.optimization import Adafactor  # noqa: F401
            return "transformers.optimization.Adafactor (defaults, beta1 None)"
        except ImportError:
            return ("the harness's plain-PyTorch Adafactor (transformers does not import; "
                    "same algorithm and defaults)")
    return {"ADAMW": "torch.optim.AdamW(foreach=True)",
            "ADAMW_LOOP": "torch.optim.AdamW(foreach=False)",
            "LION": "the harness's plain-PyTorch Lion",
            "SGD": "torch.optim.SGD", "SGD_MOMENTUM": "torch.optim.SGD(momentum=0.9)"}[name]


def _make_optimizer(name, params):
    """The setup's optimizer over params (optimizer_impl checked first)."""
    if name == "SGD":
        return torch.optim.SGD(params, lr=1e-3)
    if name == "SGD_MOMENTUM":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    if name == "ADAMW_FUSED":
        return torch.optim.AdamW(params, lr=1e-4, fused=True)
    if name == "ADAMW_LOOP":
        return torch.optim.AdamW(params, lr=1e-4, foreach=False)
    if name == "ADAM8BIT":
        import bitsandbytes as bnb
        return bnb.optim.Adam8bit(params, lr=1e-4)
    if name == "PAGED_ADAMW8BIT":
        import bitsandbytes as bnb
        return bnb.optim.PagedAdamW8bit(params, lr=1e-4)
    if name == "ADAFACTOR":
        try:
            from transformers.optimization import Adafactor
        except ImportError:
            return HarnessAdafactor(params)
        return Adafactor(params, lr=None, scale_parameter=True, relative_step=True,
                         warmup_init=False, beta1=None)
    if name == "LION":
        return Lion(params)
    return torch.optim.AdamW(params, lr=1e-4, foreach=True)


class _InBackward:
    """optimizer_in_backward: one optimizer per parameter, stepped (and its
    gradient freed) by a post-accumulate-grad hook during backward."""

    def __init__(self, name, params):
        if not hasattr(torch.Tensor, "register_post_accumulate_grad_hook"):
            raise SpecError("setup.optimizer_in_backward needs torch >= 2.1 "
                            "(register_post_accumulate_grad_hook), found "
                            f"{torch.__version__}")
        self.optimizers = {p: _make_optimizer(name, [p]) for p in params}

        def hook(p):
            self.optimizers[p].step()
            self.optimizers[p].zero_grad(set_to_none=True)
        self.handles = [p.register_post_accumulate_grad_hook(hook) for p in params]

    def step(self):
        pass

    def zero_grad(self, set_to_none=True):
        pass


def _grad_scaler():
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler("cuda")
    return torch.cuda.amp.GradScaler()


class _Measurement:
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

    def energy_j(self):
        if self.energy_start_mj is None or self.energy_end_mj is None:
            return None
        return (self.energy_end_mj - self.energy_start_mj) / 1000.0


class Nvml:
    """The few NVML calls the harness makes, through ctypes (no package
    needed): the total-energy counter (mJ since the driver loaded) and the
    board power (mW). Raises NvmlError where NVML or the counter is missing."""

    class NvmlError(RuntimeError):
        pass

    def __init__(self, device):
        import ctypes
        self._ctypes = ctypes
        try:
            self._lib = ctypes.CDLL("libnvidia-ml.so.1")
        except OSError as error:
            raise Nvml.NvmlError(f"NVML not found: {error}") from None
        if self._lib.nvmlInit_v2() != 0:
            raise Nvml.NvmlError("nvmlInit_v2 failed")
        self._handle = ctypes.c_void_p()
        uuid = None
        props = torch.cuda.get_device_properties(device)
        if hasattr(props, "uuid"):
            uuid = str(props.uuid)
            if not uuid.startswith("GPU-"):
                uuid = "GPU-" + uuid
        found = -1
        if uuid is not None:
            found = self._lib.nvmlDeviceGetHandleByUUID(
                uuid.encode(), ctypes.byref(self._handle))
        if found != 0:
            # CUDA and NVML order devices alike unless CUDA_VISIBLE_DEVICES
            # or CUDA_DEVICE_ORDER says otherwise.
            found = self._lib.nvmlDeviceGetHandleByIndex_v2(
                ctypes.c_uint(device.index or 0), ctypes.byref(self._handle))
        if found != 0:
            raise Nvml.NvmlError(f"NVML has no handle for {device}")
        self.energy_mj()  # raises when the counter is not supported

    def energy_mj(self):
        value = self._ctypes.c_ulonglong()
        if self._lib.nvmlDeviceGetTotalEnergyConsumption(
                self._handle, self._ctypes.byref(value)) != 0:
            raise Nvml.NvmlError("this GPU has no total-energy counter "
                                 "(nvmlDeviceGetTotalEnergyConsumption)")
        return value.value

    def power_w(self):
        value = self._ctypes.c_uint()
        if self._lib.nvmlDeviceGetPowerUsage(self._handle,
                                             self._ctypes.byref(value)) != 0:
            raise Nvml.NvmlError("nvmlDeviceGetPowerUsage failed")
        return value.value / 1000.0


def _open_nvml(device):
    """Nvml for a CUDA device, or None (CPU, or NVML missing)."""
    if device.type != "cuda":
        return None
    try:
        return Nvml(device)
    except Nvml.NvmlError:
        return None


def _compile_unavailable():
    """Why torch.compile cannot run here, or None when it can."""
    major = int(torch.__version__.split(".")[0])
    if major < 2 or not hasattr(torch, "compile"):
        return f"torch.compile needs torch >= 2.0, found {torch.__version__}"
    return None


def _measure_batch(spec, setup, device, batch, warmup, steps, record,
                   compile_model=False, nvml=None, group=None):
    """Builds a fresh model and optimizer and runs warmup + steps training
    steps as the setup says (precision, optimizer, adapters, freeze,
    grad_accum microbatches, the forward through torch.compile when
    compile_model; under a torch.distributed group, the model wrapped as the
    setup's parallel strategy says, on this rank's own microbatches); raises
    on OOM or any other failure."""
    cuda = device.type == "cuda"
    if compile_model:
        why = _compile_unavailable()
        if why is not None:
            raise SpecError(why)
    if setup.attention in ("SDPA", "FLASH") and not HAS_SDPA:
        raise SpecError(f"setup.attention = {setup.attention} needs torch >= 2.0 "
                        f"(scaled_dot_product_attention), found {torch.__version__}")
    if setup.attention == "FLASH" and not cuda:
        raise SpecError("setup.attention = FLASH runs on CUDA only")
    accum = max(setup.grad_accum, 1)
    if batch % accum:
        raise SpecError(f"batch {batch} is not divisible by setup.grad_accum = {accum}")
    optimizer_impl(setup, device)
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
        optimizer = _InBackward(setup.optimizer, trainable)
    else:
        optimizer = _make_optimizer(setup.optimizer, trainable)
    forward = torch.compile(model) if compile_model else model
    scaler = None
    if mixed is torch.float16 and cuda:
        if fsdp:
            from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler
            scaler = ShardedGradScaler()
        else:
            scaler = _grad_scaler()
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
                    if mixed is not None and not _autocast_enabled(device.type):
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
    cuda = device.type == "cuda"
    nvml = _open_nvml(device)
    for batch in batches:
        _emit({"event": "batch_start", "batch": batch})
        record = _Measurement()
        try:
            impl = optimizer_impl(setup, device)
        except SpecError:
            impl = None
        oom, error = _batch_outcome(
            lambda: _measure_batch(spec, setup, device, batch, warmup, steps,
                                   record, compile_model, nvml))
        # The failed frames are gone once the measurement returned; now the
        # allocator can really give their memory back.
        gc.collect()
        peak_allocated, peak_reserved = (_cuda_peaks(device) if cuda
                                         else (None, None))
        ok = not oom and not error
        _emit({"event": "result", "batch": batch, "oom": oom,
               "peak_allocated_bytes": peak_allocated,
               "peak_reserved_bytes": peak_reserved,
               "step_seconds": _mean_step_seconds(record, ok),
               "steps": record.steps,
               "energy_j": record.energy_j() if ok else None,
               "error": error, "optimizer": impl})


# --------------------------------------------------------------------------
# Multi-GPU runs: the same steps under torch.distributed (DDP, FSDP)
# --------------------------------------------------------------------------
#
# The torch executor starts `python -m torch.distributed.run --nnodes 1
# --nproc_per_node N` with CUDA_VISIBLE_DEVICES = the assignment's GPUs; each
# rank runs this file with RANK, WORLD_SIZE and LOCAL_RANK set, on
# cuda:LOCAL_RANK (NCCL), or on the CPU with gloo (the test). Only rank 0
# prints. A batch that succeeds on every rank ends in an all_gather_object
# of every rank's figures and rank 0's result line. A failure (an OOM) can
# strike one rank inside backward while the others wait in a gradient
# all-reduce, where no in-band flag can reach them; so a failing rank posts
# its record in the rendezvous store (out of band), rank 0's watcher thread
# prints the batch's result from it, and the whole group exits
# EXIT_GROUP_FAILED, which makes torch.distributed.run stop every rank.

FSDP_STRATEGIES = {"FSDP_FULL": "FULL_SHARD", "FSDP_GRAD_OP": "SHARD_GRAD_OP",
                   "FSDP_HYBRID": "HYBRID_SHARD"}
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


def has_parallel(setup):
    """The planner's HasParallel: more than one GPU, or a strategy, offload,
    tensor parallelism or nodes named."""
    return (setup.gpus > 1 or setup.parallel != "PARALLEL_UNSPECIFIED"
            or setup.offload != "OFFLOAD_UNSPECIFIED" or setup.tensor_parallel > 1
            or setup.nodes > 1)


def _single_rank_env():
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


def _fsdp_module():
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
    if setup.parallel in FSDP_STRATEGIES:
        try:
            fsdp = _fsdp_module()
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


class _Group:
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
        """The program as the setup's strategy runs it."""
        cuda = device.type == "cuda"
        if setup.parallel not in FSDP_STRATEGIES:  # DDP (PARALLEL_UNSPECIFIED is DDP)
            from torch.nn.parallel import DistributedDataParallel
            return DistributedDataParallel(
                program, device_ids=[device.index] if cuda else None,
                bucket_cap_mb=DDP_BUCKET_CAP_MB, gradient_as_bucket_view=True)
        fsdp = _fsdp_module()
        try:
            from torch.distributed.fsdp.wrap import ModuleWrapPolicy
            policy = ModuleWrapPolicy({_Unit})
        except ImportError:  # torch < 2.1
            from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy
            policy = functools.partial(transformer_auto_wrap_policy,
                                       transformer_layer_cls={_Unit})
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
        if len(grads) > 1 or compile_model:
            # Frozen and trainable weights in one unit (LoRA, freeze): one
            # flat parameter cannot mix them unless FSDP keeps the originals;
            # torch.compile needs them too.
            kwargs["use_orig_params"] = True
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
        _emit(_group_result(first["batch"], [], failed=first))
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


def _group_result(batch, ranks, failed=None):
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
            "peak_source": ranks[0]["peak_source"]}


PEAK_SOURCE_CUDA = "torch.cuda.max_memory_allocated"
PEAK_SOURCE_CPU = ("cpu run: no allocator peak; counted bytes of parameters, gradients "
                   "(DDP buckets) and optimizer state after a step, activations excluded")


def run_batches_distributed(spec, setup, group, batches, warmup, steps, compile_model=False):
    """run_batches under torch.distributed: every rank runs each batch on its
    own microbatch of `batch` samples; rank 0 prints one result per batch."""
    device = group.device
    cuda = device.type == "cuda"
    nvml = _open_nvml(device)
    unsupported = parallel_unsupported(setup)
    for index, batch in enumerate(batches):
        _emit({"event": "batch_start", "batch": batch})
        try:
            impl = optimizer_impl(setup, device)
        except SpecError:
            impl = None
        if unsupported is not None:  # the same on every rank: nobody runs
            _emit({"event": "result", "batch": batch, "oom": False,
                   "peak_allocated_bytes": None, "peak_reserved_bytes": None,
                   "step_seconds": None, "steps": 0, "energy_j": None,
                   "error": unsupported, "optimizer": impl, "world_size": group.world,
                   "rank_peaks_gb": None, "host_peak_gb": None})
            continue
        watcher = group.watch(index) if group.rank == 0 else None
        record = _Measurement()
        record.count_states = not cuda
        # This rank's failure is the batch's result.
        oom, error = _batch_outcome(
            lambda: _measure_batch(spec, setup, device, batch, warmup, steps,
                                   record, compile_model, nvml, group),
            prefix=f"rank {group.rank}: ")
        gc.collect()
        peak, reserved = (_cuda_peaks(device) if cuda
                          else (record.counted_bytes, None))
        ok = not oom and not error
        mine = {"rank": group.rank, "batch": batch, "world_size": group.world, "oom": oom,
                "error": error, "optimizer": impl, "peak_bytes": peak,
                "reserved_bytes": reserved, "rss_bytes": _rss_bytes(), "steps": record.steps,
                "step_seconds": _mean_step_seconds(record, ok),
                "energy_j": record.energy_j() if ok else None,
                "peak_source": PEAK_SOURCE_CUDA if cuda else PEAK_SOURCE_CPU}
        if not ok:
            group.fail(index, mine)  # does not return
        ranks = group.gather(mine)
        if group.rank == 0:
            group.ok(index)
            watcher.join()
            _emit(_group_result(batch, ranks))


# --------------------------------------------------------------------------
# Energy probes: generation at a quantization
# --------------------------------------------------------------------------

QUANTS = ("fp16", "nf4", "int8")
MAX_GENERATION_TOKENS = 8192


def _versions():
    versions = {"torch": torch.__version__, "python": platform.python_version()}
    if torch.version.cuda:
        versions["cuda"] = torch.version.cuda
    for name in ("transformers", "bitsandbytes"):
        try:
            module = __import__(name)
            versions[name] = getattr(module, "__version__", "unknown")
        except Exception:  # missing or broken: said by the failure record
            pass
    return versions


def _quantize_linears(model, quant, device):
    """Replaces every nn.Linear but the output head with a bitsandbytes
    NF4 (Linear4bit) or INT8 (Linear8bitLt) layer holding the same weights;
    moving it to the GPU quantizes it. Raises ImportError without
    bitsandbytes."""
    import bitsandbytes as bnb
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if not isinstance(child, nn.Linear) or child is head:
                continue
            bias = child.bias is not None
            if quant == "nf4":
                layer = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=bias,
                                          compute_dtype=torch.float16, quant_type="nf4")
                layer.weight = bnb.nn.Params4bit(child.weight.data.to("cpu"),
                                                 requires_grad=False, quant_type="nf4")
            else:
                layer = bnb.nn.Linear8bitLt(child.in_features, child.out_features, bias=bias,
                                            has_fp16_weights=False, threshold=6.0)
                layer.weight = bnb.nn.Int8Params(child.weight.data.to("cpu"),
                                                 requires_grad=False, has_fp16_weights=False)
            if bias:
                layer.bias = nn.Parameter(child.bias.data.to("cpu"), requires_grad=False)
            setattr(parent, name, layer.to(device))


def _build_generator(hf_config_path, quant, device):
    """The Hugging Face architecture of `hf_config_path` with random weights
    in fp16, quantized as asked; (model, params, vocab)."""
    try:
        import transformers
    except ImportError as error:
        raise SpecError(f"transformers is not installed: {error}") from None
    with open(hf_config_path) as f:
        config_dict = json.load(f)
    if not isinstance(config_dict, dict) or "model_type" not in config_dict:
        raise SpecError("--hf_config: a config.json with a model_type is needed")
    config = transformers.AutoConfig.for_model(**config_dict)
    # Random weights of the architecture: nothing is downloaded.
    model = transformers.AutoModelForCausalLM.from_config(config, torch_dtype=torch.float16)
    params = sum(p.numel() for p in model.parameters())
    model.eval()
    if quant == "fp16":
        model.to(device)
    else:
        _quantize_linears(model, quant, device)
        model.to(device)  # what was not quantized (embeddings, norms, head)
    return model, params, int(config.vocab_size)


def _generate(model, prompt, new_tokens):
    out = model.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                         do_sample=False, pad_token_id=0, eos_token_id=None)
    return out.shape[1] - prompt.shape[1]


def run_generation(hf_config, quant, device, prompt_tokens, new_tokens, warmup, idle_s):
    """One energy probe window; emits one "generation" line (with an error
    instead of figures where the quantization or NVML cannot run here)."""
    line = {"event": "generation", "quant": quant, "prompt_tokens": prompt_tokens,
            "versions": _versions()}
    try:
        if device.type != "cuda":
            raise SpecError("an energy probe needs a CUDA device (NVML's energy counter)")
        nvml = Nvml(device)
        # Idle power before anything is loaded: reported apart.
        readings = []
        end = time.perf_counter() + idle_s
        while time.perf_counter() < end:
            readings.append(nvml.power_w())
            time.sleep(0.05)
        idle_w = sum(readings) / len(readings) if readings else nvml.power_w()
        if quant != "fp16":
            try:
                import bitsandbytes  # noqa: F401
            except Exception as error:
                raise SpecError(f"{quant} needs bitsandbytes, which does not import here: "
                                f"{type(error).__name__}: {error}") from None
        model, params, vocab = _build_generator(hf_config, quant, device)
        generator = torch.Generator(device="cpu").manual_seed(0)
        prompt = torch.randint(0, vocab, (1, prompt_tokens), generator=generator).to(device)
        with torch.inference_mode():
            for _ in range(warmup):
                _generate(model, prompt, min(new_tokens, 16))
            torch.cuda.synchronize(device)
            e0, t0 = nvml.energy_mj(), time.perf_counter()
            generated = _generate(model, prompt, new_tokens)
            torch.cuda.synchronize(device)
            e1, t1 = nvml.energy_mj(), time.perf_counter()
        window_s = t1 - t0
        energy_j = (e1 - e0) / 1000.0
        line.update({"tokens_generated": int(generated), "energy_j": energy_j,
                     "idle_w": idle_w, "window_s": window_s,
                     "tokens_per_s": generated / window_s if window_s > 0 else None,
                     "j_per_1k_tokens": energy_j * 1000.0 / generated if generated else None,
                     "params": int(params)})
    except (SpecError, Nvml.NvmlError) as error:
        line["error"] = str(error)
    except Exception as error:  # the failure is the result
        line["oom"] = _is_oom(error)
        line["error"] = f"{type(error).__name__}: {error}"
    _emit(line)


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------

class _Parser(argparse.ArgumentParser):
    def error(self, message):
        _emit({"event": "error", "error": f"bad flags: {message}"})
        sys.exit(EXIT_BAD_INPUT)


def _parse_batches(text):
    batches = []
    for part in text.split(","):
        if not re.fullmatch(r"\s*[0-9]+\s*", part) or not 1 <= int(part) <= MAX_BATCH:
            raise SpecError(f"--batches {text}: '{part}' is not a batch size; allowed "
                            f"a comma-separated list of 1..{MAX_BATCH}")
        batches.append(int(part))
    return batches


def _device(name):
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
    cuda = device.type == "cuda"
    props = torch.cuda.get_device_properties(device) if cuda else None
    return {"event": "hello", "torch": torch.__version__, "cuda": torch.version.cuda,
            "device": str(device),
            "device_name": props.name if cuda else (platform.processor() or "cpu"),
            "total_memory_bytes": props.total_memory if cuda else None,
            "params": params,
            "sdpa": HAS_SDPA}


def main(argv=None):
    parser = _Parser(description="Build a Headroom model spec in PyTorch and measure it.")
    sub = parser.add_subparsers(dest="command", required=True)
    count = sub.add_parser("count", help="parameter counts, built on the meta device")
    count.add_argument("--spec", required=True)
    count.add_argument("--setup")
    for command in (count,):
        command.add_argument("--proto_path")
    run = sub.add_parser("run", help="measure training steps at each batch")
    run.add_argument("--spec", required=True)
    run.add_argument("--batches", required=True)
    run.add_argument("--setup")
    run.add_argument("--warmup", type=int, default=1)
    run.add_argument("--steps", type=int, default=3)
    run.add_argument("--device")
    run.add_argument("--positions", type=int)
    run.add_argument("--proto_path",
                     help="folder holding headroom/v1/model_pb2.py (default: "
                          f"${PROTO_ENV}, then next to this script, share/headroom/python, "
                          "build/python)")
    run.add_argument("--compile", action="store_true",
                     help="run the forward through torch.compile (torch >= 2.0; "
                          "older torch gives each batch an error result)")
    gen = sub.add_parser("generate", help="an energy probe's generation window")
    gen.add_argument("--hf_config", required=True)
    gen.add_argument("--quant", required=True)
    gen.add_argument("--prompt_tokens", type=int, default=64)
    gen.add_argument("--new_tokens", type=int, default=128)
    gen.add_argument("--warmup", type=int, default=1)
    gen.add_argument("--device")
    gen.add_argument("--idle_s", type=float, default=1.0)
    env = None
    try:
        env = distributed_env()
    except SpecError as error:
        _emit({"event": "error", "error": str(error)})
        return EXIT_BAD_INPUT
    if env is not None and env[0] != 0:
        _EMITS[0] = False  # rank 0 alone prints
    args = parser.parse_args(argv)
    if args.command == "generate":
        try:
            if args.quant not in QUANTS:
                raise SpecError(f"--quant {args.quant} is unknown; allowed {', '.join(QUANTS)}")
            for flag, value, low in (("--prompt_tokens", args.prompt_tokens, 1),
                                     ("--new_tokens", args.new_tokens, 1)):
                if not low <= value <= MAX_GENERATION_TOKENS:
                    raise SpecError(f"{flag} {value} is out of range; allowed "
                                    f"{low}..{MAX_GENERATION_TOKENS}")
            if not 0 <= args.warmup <= 10:
                raise SpecError(f"--warmup {args.warmup} is out of range; allowed 0..10")
            if not 0 <= args.idle_s <= 60:
                raise SpecError(f"--idle_s {args.idle_s} is out of range; allowed 0..60")
            device = _device(args.device)
        except SpecError as error:
            _emit({"event": "error", "error": str(error)})
            return EXIT_BAD_INPUT
        run_generation(args.hf_config, args.quant, device, args.prompt_tokens,
                       args.new_tokens, args.warmup, args.idle_s)
        return 0
    try:
        load_proto(args.proto_path)
        spec = load_spec(args.spec)
        setup = parse_setup(args.setup)
        if args.command == "count":
            _emit(dict({"name": spec.name}, **count_params(spec, setup)))
            return 0
        if args.positions is not None:
            if not 1 <= args.positions <= MAX_DIMENSION:
                raise SpecError(f"--positions {args.positions} is out of range; allowed "
                                f"1..{MAX_DIMENSION}")
            setup.positions = args.positions
        batches = _parse_batches(args.batches)
        for flag, value, low in (("--warmup", args.warmup, 0), ("--steps", args.steps, 1)):
            if not low <= value <= MAX_STEPS:
                raise SpecError(f"{flag} {value} is out of range; allowed {low}..{MAX_STEPS}")
        world = env[1] if env is not None else 1
        if max(1, setup.gpus) != world:
            raise SpecError(
                f"setup.gpus = {setup.gpus} but {world} process(es) run: a multi-GPU setup "
                f"runs under python -m torch.distributed.run --nproc_per_node {setup.gpus} "
                "(the worker's torch executor starts it so), one process per GPU")
        device = _device(args.device) if env is None else torch.device(
            "cpu" if args.device == "cpu" else "cuda")
        # A parallel setup on one GPU (the planner counts its buckets or
        # gathered units too) runs its strategy in a group of one; without
        # the launcher the harness starts that group itself.
        parallel = has_parallel(setup)
        if parallel and env is None:
            env = _single_rank_env()
        if device.type == "cuda" and not torch.cuda.is_available():
            raise SpecError(f"--device {args.device}: this torch ({torch.__version__}) sees "
                            "no CUDA device")
        # Build once on meta: a spec that cannot be built fails here, before
        # any batch, and the hello line can carry the parameter count.
        meta = Program(spec, setup, torch.device("meta"))
        params = sum(p.numel() for p in meta.parameters())
        del meta
        group = _Group(env, device) if parallel else None
    except SpecError as error:
        _emit({"event": "error", "error": str(error)})
        return EXIT_BAD_INPUT
    compile_model = args.compile or setup.compile
    if group is None:
        _emit(_hello(device, params))
        run_batches(spec, setup, device, batches, args.warmup, args.steps, compile_model)
        return 0
    hello = _hello(group.device, params)
    hello.update({"world_size": group.world, "backend": group.backend,
                  "parallel": setup.parallel})
    _emit(hello)
    run_batches_distributed(spec, setup, group, batches, args.warmup, args.steps,
                            compile_model)
    group.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
