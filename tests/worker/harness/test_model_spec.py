"""headroom_harness.model_spec: a ModelSpec read and checked as the
planner's ValidateLayer does, each error naming the field."""

import glob
import json
import os

import pytest

from headroom_harness import model_spec
from headroom_harness.errors import SpecError

TINY_LM = {
    "name": "tiny-lm", "positions": 16,
    "layers": [
        {"name": "embed", "embedding": {"numEmbeddings": 100, "dim": 32}},
        {"name": "blocks", "repeat": 2, "block": {"layers": [
            {"name": "attn", "attention": {"hidden": 32, "heads": 4, "kvHeads": 2}},
            {"name": "mlp", "mlp": {"hidden": 32, "ffn": 64, "gated": True}},
        ]}},
        {"name": "norm", "norm": {"kind": "RMS", "dim": 32}},
        {"name": "head", "linear": {"inFeatures": 32, "outFeatures": 100, "logits": True}},
    ],
}

pytestmark = pytest.mark.usefixtures("generated_protos")


def parse(spec):
    return model_spec.parse_spec(json.dumps(spec), "--spec test.json")


def test_a_spec_with_proto3_defaults_filled_in():
    spec = parse(TINY_LM)
    assert (spec.name, spec.positions) == ("tiny-lm", 16)
    assert [layer.kind for layer in spec.layers] == ["embedding", "block", "norm", "linear"]
    block = spec.layers[1]
    assert (block.repeat, block.path) == (2, "spec.layers[1]")
    assert [child.path for child in block.children] == [
        "spec.layers[1].block.layers[0]", "spec.layers[1].block.layers[1]"]
    attention = block.children[0].f
    assert (attention["heads"], attention["kv_heads"], attention["head_dim"]) == (4, 2, 0)
    assert spec.layers[2].f["kind"] == "RMS"  # enums by name
    assert spec.layers[3].f["logits"] is True and spec.layers[3].f["tied"] is False


def test_every_catalog_template_reads(model_path):
    files = glob.glob(os.path.join(os.path.dirname(model_path("x")), "*.json"))
    assert len(files) > 20
    for path in files:
        spec = model_spec.load_spec(path)
        assert spec.name and spec.layers, path


def with_layer(layer):
    return {"name": "bad", "positions": 16, "layers": [layer]}


@pytest.mark.parametrize("spec,message", [
    ({"name": "", "layers": [{"norm": {"kind": "LAYER", "dim": 4}}]},
     "spec.name is empty; give the model a name (lowercase, digits, dashes)"),
    ({"name": "x", "layers": []},
     "spec.layers is empty for model 'x'; a spec needs at least one layer"),
    (with_layer({"conv": {"inChannels": 3, "outChannels": 4, "kernel": [3, 3, 3]}}),
     "spec.layers[0].conv.kernel has 3 values; allowed 1 or 2 (dims)"),
    (with_layer({"attention": {"hidden": 32, "heads": 4, "kvHeads": 3}}),
     "spec.layers[0].attention.kv_heads = 3 must divide heads = 4"),
    (with_layer({"attention": {"hidden": 30, "heads": 4}}),
     "spec.layers[0].attention.heads = 4 does not divide hidden = 30; set head_dim or use a "
     "divisor of hidden"),
    (with_layer({"norm": {"dim": 4}}),
     "spec.layers[0].norm.kind is not set; allowed LAYER, RMS, BATCH, GROUP"),
    (with_layer({"name": "x"}),
     "spec.layers[0] has no kind; allowed: embedding, linear, norm, attention, mlp, moe, conv, "
     "recurrent, elementwise, parameters, block"),
    (with_layer({"linear": {"inFeatures": 0, "outFeatures": 4}}),
     "spec.layers[0].linear.in_features = 0 is out of range; allowed 1..4294967296"),
    (with_layer({"block": {"layers": []}}),
     "spec.layers[0].block.layers is empty; a block needs at least one layer"),
    ({"name": "x", "layers": [{"mlp": {"hidden": 4, "ffn": 8}}]},
     "spec.layers[0].positions is not set and the spec has no default positions; allowed "
     "1..4294967296"),
])
def test_bad_specs_name_the_field(spec, message):
    with pytest.raises(SpecError) as error:
        parse(spec)
    assert str(error.value) == message


def test_unknown_fields_are_rejected_as_the_planner_does():
    spec = dict(TINY_LM, colour="blue")
    with pytest.raises(SpecError) as error:
        parse(spec)
    assert str(error.value).startswith("--spec test.json: ")
    assert "colour" in str(error.value)


def test_a_missing_file_names_the_flag(tmp_path):
    path = tmp_path / "nope.json"
    with pytest.raises(SpecError) as error:
        model_spec.load_spec(str(path))
    assert str(error.value) == f"--spec {path}: cannot read: No such file or directory"
