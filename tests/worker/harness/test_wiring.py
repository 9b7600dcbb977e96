"""headroom_harness.wiring: which tensor each layer copy reads, decided from
shapes alone. Planned here over stand-in modules (the wiring reads only
whether a module has trainable parameters and a convolution's kernel), so
no torch is needed."""

import json
import types

import pytest

from headroom_harness.errors import SpecError
from headroom_harness.model_spec import parse_spec
from headroom_harness.setups import Setup
from headroom_harness.wiring import Op, Segment, Wiring

pytestmark = pytest.mark.usefixtures("generated_protos")


class StandIn:
    """A layer copy's module as the wiring sees it: one trainable parameter,
    and a kernel (and the stride and padding it is given) for a conv."""

    def __init__(self, layer):
        self.kernel_size = None
        if layer.kind == "conv":
            kernel = layer.f["kernel"]
            self.kernel_size = tuple(kernel * 2 if len(kernel) == 1 else kernel)

    def parameters(self):
        return iter([types.SimpleNamespace(requires_grad=True)])


def stand_ins(layers):
    return [[stand_ins(layer.children) if layer.kind == "block" else StandIn(layer)
             for _ in range(layer.repeat or 1)] for layer in layers]


def plan(spec_json, checkpointing=False, fsdp_units=False):
    spec = parse_spec(json.dumps(spec_json), "test")
    wiring = Wiring(spec, Setup())
    modules = stand_ins(spec.layers)
    units, final = wiring.plan(modules, checkpointing, fsdp_units)
    return wiring, modules, units, final


LM = {"name": "lm", "positions": 16, "layers": [
    {"name": "embed", "embedding": {"numEmbeddings": 100, "dim": 32}},
    {"name": "blocks", "repeat": 2, "block": {"layers": [
        {"name": "norm", "norm": {"kind": "RMS", "dim": 32}},
        {"name": "attn", "attention": {"hidden": 32, "heads": 4}},
        {"name": "add", "elementwise": {"op": "ADD", "dim": 32}},
    ]}},
    {"name": "head", "linear": {"inFeatures": 32, "outFeatures": 100, "logits": True}},
]}


def test_a_language_model_reads_in_order_and_ends_in_cross_entropy():
    wiring, _, ops, final = plan(LM)
    assert all(isinstance(op, Op) for op in ops)
    assert [op.kind for op in ops] == ["embedding"] + ["norm", "attention", "ADD"] * 2 + [
        "linear"]
    ids, targets = wiring.inputs
    assert (ids.make, ids.shape.positions, ids.shape.width) == (("ids", 100), 16, 1)
    assert (targets.make, targets.shape.positions) == (("targets", 100), 16)
    embed, norm, attn, add = ops[:4]
    assert embed.reads == [(ids.vid, [])]
    assert norm.reads == [(embed.out, [])]
    assert attn.reads == [(norm.out, [])]
    # The residual: the newest output plus the block's first input of its shape.
    assert add.reads == [(attn.out, []), (embed.out, [])]
    assert ops[4].reads == [(add.out, [])]  # the next copy reads the stream
    head = ops[-1]
    assert head.reads == [(ops[-2].out, [])]
    assert [v.vid for v in final] == [head.out]
    assert final[0].logits and final[0].targets == targets.vid
    assert head.extra["targets"] == targets.vid


def test_checkpointing_makes_a_segment_per_block_copy():
    _, _, units, _ = plan(LM, checkpointing=True)
    kinds = [type(unit).__name__ for unit in units]
    assert kinds == ["Op", "Segment", "Segment", "Op"]
    assert [op.kind for op in units[1].ops] == ["norm", "attention", "ADD"]
    assert units[1].checkpoint and units[1].owner is None


def test_fsdp_units_are_the_copies_of_a_top_level_repeated_layer():
    _, modules, units, _ = plan(LM, fsdp_units=True)
    segments = [unit for unit in units if isinstance(unit, Segment)]
    assert [segment.owner for segment in segments] == [(modules[1], 0), (modules[1], 1)]
    assert not any(segment.checkpoint for segment in segments)


def conv_spec(in_positions, positions, kernel):
    return {"name": "cnn", "positions": positions, "layers": [
        {"name": "conv", "conv": {"inChannels": 3, "outChannels": 8, "kernel": [kernel],
                                  "inPositions": in_positions}}]}


def test_a_conv_takes_the_usual_stride_that_fits_its_positions():
    # 32 x 32 to 16 x 16 with a 3 x 3 kernel: not "same" (32), "valid" (30)
    # or patches (10), but the stride-2 downsample, padding 1.
    wiring, modules, ops, final = plan(conv_spec(1024, 256, 3))
    conv = modules[0][0]
    assert (conv.stride, conv.padding) == ((2, 2), (1, 1))
    (image,) = wiring.inputs
    assert (image.make, image.shape.layout, image.shape.grid) == (("float",), "spatial",
                                                                  (32, 32))
    assert final[0].shape.grid == (16, 16) and final[0].shape.width == 8
    # Patches (stride = kernel) when that is what fits: ViT's 16 x 16.
    _, modules, _, _ = plan(conv_spec(224 * 224, 14 * 14, 16))
    assert (modules[0][0].stride, modules[0][0].padding) == ((16, 16), (0, 0))


def test_a_conv_no_usual_stride_fits_names_the_layer():
    with pytest.raises(SpecError) as error:
        plan(conv_spec(1024, 1000, 3))
    assert str(error.value) == ("spec.layers[0].conv: no usual stride and padding take "
                                "in_positions = 1024 to positions = 1000 with kernel [3, 3] "
                                "in 2 dims")
