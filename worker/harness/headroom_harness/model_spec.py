"""Reading a model spec: headroom.v1.ModelSpec as proto3 JSON (the planner's
models/*.json), checked as the planner's ValidateLayer does, naming the field."""

import dataclasses

from headroom_harness.errors import SpecError
from headroom_harness.proto import load_proto, message_fields, parse_json

# Limits shared with the planner (core/memory/model_spec.h).
MAX_DIMENSION = 1 << 32
MAX_BLOCK_DEPTH = 8
MAX_REPEAT = 100000
MAX_NUM_LAYERS = 1000

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
    fields = message_fields(getattr(message, kind), f"{path}.{kind}")
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
    message = parse_json(text, model_pb2.ModelSpec(), what)
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

