"""headroom_harness.setups: a TrainingSetup read and checked as the
planner's ValidateSetup does, and the planner's ApplyFreeze."""

import json

import pytest

from headroom_harness import setups
from headroom_harness.errors import SpecError
from headroom_harness.model_spec import parse_spec
from headroom_harness.setups import Setup

pytestmark = pytest.mark.usefixtures("generated_protos")


def parse(setup):
    return setups.parse_setup(json.dumps(setup))


def test_no_setup_is_the_default_one():
    assert setups.parse_setup(None) == Setup()
    assert parse({}) == Setup(precision="FP32", optimizer="ADAMW")


def test_every_field_is_read_by_name():
    setup = parse({"precision": "BF16_MIXED", "optimizer": "LION",
                   "activationCheckpointing": True, "positions": 4096,
                   "attention": "SDPA", "lora": {"rank": 16, "targets": ["q", "v"],
                                                 "dropout": 0.05},
                   "quantBase": "NF4", "freeze": {"layers": ["embed*"]},
                   "gradAccum": 4, "compile": True, "gpus": 8, "parallel": "FSDP_FULL",
                   "offload": "PARAMS"})
    assert (setup.precision, setup.optimizer, setup.attention) == ("BF16_MIXED", "LION", "SDPA")
    assert setup.activation_checkpointing and setup.compile
    assert (setup.positions, setup.grad_accum, setup.gpus) == (4096, 4, 8)
    assert (setup.lora_rank, setup.lora_targets, setup.lora_dropout) == (16, ["q", "v"],
                                                                         pytest.approx(0.05))
    assert (setup.quant_base, setup.freeze_layers) == ("NF4", ["embed*"])
    assert (setup.parallel, setup.offload) == ("FSDP_FULL", "PARAMS")
    assert setup.half and not setup.true_half
    assert setups.has_parallel(setup)


def test_setup_from_a_file(tmp_path):
    path = tmp_path / "setup.json"
    path.write_text('{"precision": "BF16_TRUE"}')
    setup = setups.parse_setup(str(path))
    assert setup.precision == "BF16_TRUE" and setup.true_half


def test_a_setup_that_is_neither_json_nor_a_file(tmp_path):
    path = tmp_path / "missing.json"
    with pytest.raises(SpecError) as error:
        setups.parse_setup(str(path))
    assert str(error.value) == (f"--setup {path}: not JSON and not a readable file "
                                "(No such file or directory)")


@pytest.mark.parametrize("setup,message", [
    ({"attention": "FLASH"},
     "setup.attention = FLASH is not allowed; FlashAttention runs in 16 bits only: allowed "
     "with precision BF16_MIXED, FP16_MIXED, BF16_TRUE or FP16_TRUE"),
    ({"gradAccum": 1025}, "setup.grad_accum = 1025 is not allowed; allowed 0 or 1 (none) .. 1024"),
    ({"lora": {"targets": ["q"]}},
     "setup.lora.rank = 0 is not allowed; lora.targets and lora.dropout need lora.rank 1 .. 4096"),
    ({"lora": {"rank": 8, "targets": ["qkv"]}},
     "setup.lora.targets[0] = 'qkv' is not allowed; allowed q, k, v, o, gate, up, down, "
     "all-linear, lm_head, embed"),
    ({"loss": "FULL_CE", "lossChunks": 4},
     "setup.loss_chunks = 4 is not allowed; loss_chunks needs loss CHUNKED_CE"),
    ({"loss": "CHUNKED_CE", "lossChunks": 5000},
     "setup.loss_chunks = 5000 is not allowed; allowed 0 (the framework's default) .. 4096"),
    ({"checkpointEvery": 2},
     "setup.checkpoint_every = 2 is not allowed; checkpoint_every needs checkpointing "
     "SELECTIVE"),
    ({"checkpointing": "NO_CHECKPOINTING", "activationCheckpointing": True},
     "setup.checkpointing = NO_CHECKPOINTING is not allowed; activation_checkpointing is "
     "true: set one of them"),
    ({"offload": "OPTIMIZER_GRADIENTS", "gradAccum": 4},
     "setup.offload = OPTIMIZER_GRADIENTS is not allowed; offloaded gradients cannot "
     "accumulate: allowed with grad_accum 0 or 1"),
    ({"offload": "OPTIMIZER_GRADIENTS", "gpus": 2, "parallel": "DDP"},
     "setup.offload = OPTIMIZER_GRADIENTS is not allowed; torchao's CPUOffloadOptimizer runs "
     "on one GPU: allowed with gpus 0 or 1 and no parallel strategy"),
    ({"quantBase": "NF4"},
     "setup.quant_base = NF4 is not allowed; a quantized base trains only through adapters: "
     "set lora.rank 1 .. 4096"),
    ({"gpus": 3, "tensorParallel": 2},
     "setup.tensor_parallel = 2 is not allowed; allowed 0 or 1 (none) or a divisor of gpus (3)"),
    ({"gpus": 2, "parallel": "DDP", "offload": "PARAMS"},
     "setup.offload = PARAMS is not allowed; offload needs a sharded strategy: parallel ZERO1, "
     "ZERO2, ZERO3, FSDP_GRAD_OP, FSDP_FULL or FSDP_HYBRID"),
    ({"gpus": 600}, "setup.gpus = 600 is not allowed; allowed 0 .. 512"),
    ({"gpus": 2, "parallel": "FSDP_FULL", "optimizerInBackward": True},
     "setup.optimizer_in_backward = true is not allowed; a step per parameter in backward "
     "needs unsharded gradients: parallel DDP or ZERO1"),
])
def test_bad_setups_name_the_field(setup, message):
    with pytest.raises(SpecError) as error:
        parse(setup)
    assert str(error.value) == message


def test_lora_targets_as_the_planner_resolves_them():
    assert setups.lora_targets(Setup()) == set()
    assert setups.lora_targets(Setup(lora_rank=8)) == {"q", "v"}
    assert setups.lora_targets(Setup(lora_rank=8, lora_targets=["all-linear"])) == {
        "q", "k", "v", "o", "gate", "up", "down", "linear"}


def test_has_parallel():
    assert not setups.has_parallel(Setup())
    assert not setups.has_parallel(Setup(gpus=1))
    assert setups.has_parallel(Setup(gpus=2))
    assert setups.has_parallel(Setup(parallel="DDP"))
    assert setups.has_parallel(Setup(tensor_parallel=2))


STACK = {"name": "stack", "positions": 8, "layers": [
    {"name": "embed", "embedding": {"numEmbeddings": 10, "dim": 4}},
    {"name": "blocks", "repeat": 6, "mlp": {"hidden": 4, "ffn": 8}},
    {"name": "head", "linear": {"inFeatures": 4, "outFeatures": 10, "logits": True}},
]}


def test_train_last_blocks_splits_the_last_repeated_layer():
    spec = parse_spec(json.dumps(STACK), "stack")
    frozen, weights_frozen = setups.apply_freeze(spec, Setup(train_last_blocks=2))
    assert [(layer.name, layer.repeat, layer.frozen) for layer in frozen.layers] == [
        ("embed", 0, True), ("blocks (frozen copies)", 4, True), ("blocks", 2, False),
        ("head", 0, False)]
    assert weights_frozen == [False] * 4


def test_freeze_layers_by_name_and_prefix():
    spec = parse_spec(json.dumps(STACK), "stack")
    _, weights_frozen = setups.apply_freeze(spec, Setup(freeze_layers=["emb*", "head"]))
    assert weights_frozen == [True, False, True]
    with pytest.raises(SpecError) as error:
        setups.apply_freeze(spec, Setup(freeze_layers=["body"]))
    assert str(error.value) == ("setup.freeze.layers[0] = 'body' names no top-level layer of "
                                "stack; its layers: embed, blocks, head")


def test_the_issue_30_fields_are_read():
    setup = parse({"expandableSegments": True, "phases": ["LOAD", "STEP", "EVAL"],
                   "evalBatch": 16, "generateTokens": 64})
    assert setup.expandable_segments
    assert (setup.phases, setup.eval_batch, setup.generate_tokens) == (
        ["LOAD", "STEP", "EVAL"], 16, 64)
    assert parse({}).phases == []


def test_an_unspecified_phase_is_named_with_the_allowed_ones():
    with pytest.raises(SpecError) as error:
        parse({"phases": ["LOAD", "JOB_PHASE_UNSPECIFIED"]})
    assert str(error.value) == ("setup.phases[1] = JOB_PHASE_UNSPECIFIED is not allowed; "
                                "allowed LOAD, FIRST_STEP, STEP, EVAL, GENERATE, SAVE")
    with pytest.raises(SpecError) as error:
        parse({"phases": ["LUNCH"]})
    assert "phases" in str(error.value)


def test_the_issue_31_fields_are_read():
    setup = parse({"framework": "TORCHTUNE", "frameworkVersion": "0.6", "loss": "CHUNKED_CE",
                   "lossChunks": 16, "activationOffloading": True,
                   "checkpointing": "SELECTIVE", "checkpointEvery": 2,
                   "lora": {"rank": 8, "targets": ["lm_head", "embed", "q"]},
                   "offload": "OPTIMIZER_GRADIENTS"})
    assert (setup.framework, setup.framework_version) == ("TORCHTUNE", "0.6")
    assert (setup.loss, setup.loss_chunks, setup.activation_offloading) == ("CHUNKED_CE", 16,
                                                                             True)
    assert (setup.checkpointing, setup.checkpoint_every) == ("SELECTIVE", 2)
    assert setups.lora_targets(setup) == {"lm_head", "embed", "q"}
    # torchao's optimizer offload is one GPU's, not a parallel setup.
    assert not setups.has_parallel(setup)
    assert parse({}).framework == "GENERIC"  # FRAMEWORK_UNSPECIFIED


def test_checkpoint_mode():
    assert setups.checkpoint_mode(Setup()) == "none"
    assert setups.checkpoint_mode(Setup(activation_checkpointing=True)) == "full"
    assert setups.checkpoint_mode(Setup(checkpointing="FULL")) == "full"
    assert setups.checkpoint_mode(Setup(checkpointing="SELECTIVE", checkpoint_every=2)) == "every"
    assert setups.checkpoint_mode(Setup(checkpointing="SELECTIVE")) == "op"
    assert setups.checkpoint_mode(Setup(checkpointing="NO_CHECKPOINTING")) == "none"


def test_an_unknown_framework_names_the_field():
    with pytest.raises(SpecError) as error:
        parse({"framework": 99})
    assert str(error.value) == ("setup.framework = 99 is unknown; allowed GENERIC, "
                                "HF_TRAINER, LITGPT, TORCHTUNE, DEEPSPEED, TORCH")
    with pytest.raises(SpecError) as error:
        parse({"framework": "AXOLOTL"})
    assert str(error.value).startswith("--setup: Failed to parse framework field: Invalid "
                                       "enum value AXOLOTL")
