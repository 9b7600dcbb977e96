"""headroom_harness.frameworks and the issue-31 paths of a step (CPU):
each framework's load and QLoRA layer, chunked losses, activation
offloading, selective checkpointing, the FSDP flavour and the optimizers
that need a library, each with the record of what ran."""

import json

import pytest

torch = pytest.importorskip("torch", reason="the framework paths need torch")

from headroom_harness import fourbit, frameworks  # noqa: E402
from headroom_harness.errors import SpecError  # noqa: E402
from headroom_harness.model_spec import parse_spec  # noqa: E402
from headroom_harness.models import LoraEmbedding, LoraLinear, count_params  # noqa: E402
from headroom_harness.optimizers import optimizer_impl  # noqa: E402
from headroom_harness.phases import measure_batch  # noqa: E402
from headroom_harness.program import Program  # noqa: E402
from headroom_harness.records import Measurement  # noqa: E402
from headroom_harness.setups import Setup  # noqa: E402
from headroom_harness.wiring import Segment  # noqa: E402

pytestmark = pytest.mark.usefixtures("generated_protos")

CPU = torch.device("cpu")

# A tiny Llama-shaped template: embedding 100 x 32, two blocks of RMS norm,
# attention (q, k, v, o 32 x 32), a residual add, RMS norm, a gated MLP
# (gate, up 32 x 64; down 64 x 32) and a residual add; an untied head 32 x 100.
TINY = {"name": "tiny-llama", "positions": 16, "layers": [
    {"name": "embed", "embedding": {"numEmbeddings": 100, "dim": 32}},
    {"name": "blocks", "repeat": 2, "block": {"layers": [
        {"name": "attn_norm", "norm": {"kind": "RMS", "dim": 32}},
        {"name": "attn", "attention": {"hidden": 32, "heads": 4}},
        {"name": "attn_add", "elementwise": {"op": "ADD", "dim": 32}},
        {"name": "mlp_norm", "norm": {"kind": "RMS", "dim": 32}},
        {"name": "mlp", "mlp": {"hidden": 32, "ffn": 64, "gated": True}},
        {"name": "mlp_add", "elementwise": {"op": "ADD", "dim": 32}},
    ]}},
    {"name": "head", "linear": {"inFeatures": 32, "outFeatures": 100, "logits": True}},
]}


def spec():
    return parse_spec(json.dumps(TINY), "tiny")


def qlora(framework, **fields):
    return Setup(framework=framework, lora_rank=4, lora_targets=["all-linear"],
                 quant_base="NF4", **fields)


def one_step(setup, batch=2):
    record = Measurement()
    measure_batch(spec(), setup, CPU, batch, 0, 1, record)
    return record


@pytest.mark.parametrize("setup,framework,emulated", [
    (Setup(), "generic", []),
    (Setup(framework="TORCH", lora_rank=4), "torch", []),
    (Setup(framework="DEEPSPEED"), "deepspeed", []),
    (qlora("HF_TRAINER"), "hf-trainer", ["bitsandbytes.Linear4bit"]),
    (qlora("LITGPT"), "litgpt", ["bitsandbytes.Linear4bit"]),
    (qlora("TORCHTUNE"), "torchtune", ["torchao.NF4Tensor"]),
    (Setup(framework="TORCHTUNE", precision="BF16_TRUE", lora_rank=4), "torchtune", []),
    (Setup(framework="LITGPT", precision="BF16_TRUE"), "litgpt", []),
    (Setup(framework="HF_TRAINER", precision="BF16_MIXED", lora_rank=4), "hf-trainer", []),
])
def test_each_path_runs_one_step_and_says_what_ran(setup, framework, emulated):
    # Where the library itself imports it runs, and nothing is emulated.
    emulated = [name for name in emulated
                if not fourbit.library_imports(name.split(".")[0])]
    record = one_step(setup)
    assert record.steps == 1
    assert (record.framework, record.emulated) == (framework, emulated)
    assert record.load


def test_an_unknown_framework_is_refused_naming_the_field():
    with pytest.raises(SpecError) as error:
        one_step(Setup(framework="AXOLOTL"))
    assert str(error.value) == ("setup.framework = AXOLOTL is unknown; allowed GENERIC, "
                                "HF_TRAINER, LITGPT, TORCHTUNE, DEEPSPEED, TORCH")


def dtypes(program):
    base = {p.dtype for n, p in program.named_parameters() if "lora" not in n}
    adapters = {p.dtype for n, p in program.named_parameters() if "lora" in n}
    return base, adapters


@pytest.mark.parametrize("framework,base,adapters", [
    # hf-trainer: from_pretrained in torch_dtype, PEFT's adapters in fp32.
    ("HF_TRAINER", torch.bfloat16, torch.float32),
    # litgpt bf16-true: the whole model, adapters too, in bf16.
    ("LITGPT", torch.bfloat16, torch.bfloat16),
    # torchtune: built under set_default_dtype(bf16), adapters included.
    ("TORCHTUNE", torch.bfloat16, torch.bfloat16),
    # The harness's own path: fp32 adapters, the base cast by model.to().
    ("GENERIC", torch.bfloat16, torch.float32),
])
def test_each_path_creates_its_weights_in_its_dtype(framework, base, adapters):
    setup = Setup(framework=framework, precision="BF16_TRUE", lora_rank=4)
    program = frameworks.load(spec(), setup, CPU).program
    assert dtypes(program) == ({base}, {adapters})


def test_a_loaded_program_holds_the_checkpoint():
    setup = Setup(framework="HF_TRAINER", lora_rank=4)
    state = frameworks.checkpoint_state(spec(), setup)
    program = frameworks.load(spec(), setup, CPU).program
    assert torch.equal(program.layers[0][0].weight, state["layers.0.0.weight"])
    assert torch.equal(program.layers[1][0][0][0].weight, torch.ones(32))  # a norm
    q = program.layers[1][0][1][0].q
    assert isinstance(q, LoraLinear)
    assert torch.equal(q.base.weight, state["layers.1.0.1.0.q.weight"])
    assert torch.count_nonzero(q.lora_B.weight) == 0  # adapters start as PEFT's


def test_a_quantized_layer_holds_the_4bit_bytes():
    program = frameworks.load(spec(), qlora("TORCHTUNE"), CPU).program
    q = program.layers[1][0][1][0].q.base
    assert isinstance(q, fourbit.Linear4bit) and q.library == "torchao"
    # q is 32 x 32 = 1,024 values: codes 1,024 / 2 = 512 bytes, one int8
    # absmax per 64 values = 16, one fp32 scale per 256 absmaxes (one) = 4,
    # the fp32 mean = 4: 536 bytes (a 16-bit weight: 2,048).
    held = sum(b.numel() * b.element_size() for b in q.buffers())
    assert held == fourbit.packed_bytes(1024) == 536
    # The head stays 16-bit and unadapted (kHead); the norms are not linears.
    assert type(program.layers[2][0]).__name__ == "Linear"
    assert sum(isinstance(m, fourbit.Linear4bit) for m in program.modules()) == 2 * 7


def test_the_4bit_layer_dequantizes_close_to_its_weight():
    torch.manual_seed(0)
    weight = torch.randn(64, 48) * 0.02
    layer = fourbit.Linear4bit(48, 64, False, "torchao", None, CPU)
    layer.load_weight(weight)
    # A value is off by at most half NF4's widest gap, (1.0 - 0.6962) / 2 =
    # 0.1519 of its block's absmax, plus the 8-bit absmax's rounding: under
    # 0.2 of the largest absmax.
    assert (layer.dequantized(torch.float32) - weight).abs().max() < 0.2 * weight.abs().max()
    x = torch.randn(3, 48, requires_grad=True)
    layer(x).sum().backward()
    assert torch.allclose(x.grad, layer.dequantized(torch.float32).sum(0).expand(3, 48),
                          atol=1e-6)


def losses_of(setup, batch=3):
    torch.manual_seed(0)
    program = Program(spec(), setup, CPU)
    chunks = frameworks.loss_chunks(setup, 16)
    if chunks:
        program.set_chunked_loss("litgpt" if setup.framework == "LITGPT" else "torchtune",
                                 -(-16 // chunks) if setup.framework == "LITGPT" else chunks)
    torch.manual_seed(1)
    data = program.make_batch(batch, CPU)
    loss = program(data)
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in program.named_parameters()}, program


@pytest.mark.parametrize("framework,chunks", [("TORCHTUNE", 0), ("TORCHTUNE", 3),
                                              ("LITGPT", 0), ("LITGPT", 5)])
def test_a_chunked_loss_equals_the_full_loss(framework, chunks):
    full, full_grads, _ = losses_of(Setup(framework=framework, loss="FULL_CE"))
    chunked, grads, program = losses_of(Setup(framework=framework, loss="CHUNKED_CE",
                                              loss_chunks=chunks))
    assert len(program.heads) == 1  # the head runs in the loss
    assert abs(full.item() - chunked.item()) < 1e-5
    for name, grad in grads.items():
        assert torch.allclose(grad, full_grads[name], atol=1e-6), name


def test_the_chunk_defaults():
    # torchtune: 8 pieces; litgpt: one per 128 positions (4,096 -> 32).
    assert frameworks.loss_chunks(Setup(framework="TORCHTUNE", loss="CHUNKED_CE"), 4096) == 8
    assert frameworks.loss_chunks(Setup(framework="LITGPT", loss="CHUNKED_CE"), 4096) == 32
    assert frameworks.loss_chunks(Setup(framework="LITGPT", loss="CHUNKED_CE"), 100) == 1
    assert frameworks.loss_chunks(Setup(loss="CHUNKED_CE", loss_chunks=4), 4096) == 4
    assert frameworks.loss_chunks(Setup(), 4096) == 0


def test_offloaded_activations_give_the_same_gradients():
    plain_loss, plain, _ = losses_of(Setup())
    loss, grads, program = losses_of(Setup(activation_offloading=True))
    assert loss.item() == plain_loss.item()
    assert program.offloader.offloaded_bytes > 0
    for name, grad in grads.items():
        assert torch.equal(grad, plain[name]), name


def test_a_run_with_offloading_records_the_bytes_moved():
    # What goes to the host is every saved tensor of 1,024 bytes or more
    # that is not a parameter; at batch 2 x 16 positions x width 32 in fp32
    # one activation is 4,096 bytes, so there is at least one.
    record = one_step(Setup(activation_offloading=True))
    assert record.offloaded_bytes >= 4096
    assert one_step(Setup()).offloaded_bytes is None


def test_offloading_with_checkpointing_and_a_chunked_loss():
    plain_loss, plain, _ = losses_of(Setup())
    loss, grads, _ = losses_of(Setup(activation_offloading=True, checkpointing="FULL",
                                     loss="CHUNKED_CE", loss_chunks=4))
    assert abs(loss.item() - plain_loss.item()) < 1e-5
    for name, grad in grads.items():
        assert torch.allclose(grad, plain[name], atol=1e-6), name


def checkpointed(setup):
    program = Program(spec(), setup, CPU)
    return [u.checkpoint for u in program.units if isinstance(u, Segment)]


def test_selective_checkpointing_every_nth_block():
    # torchtune counts blocks from 1 and checkpoints the multiples of N.
    assert checkpointed(Setup(checkpointing="FULL")) == [True, True]
    assert checkpointed(Setup(checkpointing="SELECTIVE", checkpoint_every=2)) == [False, True]
    assert checkpointed(Setup(checkpointing="SELECTIVE", checkpoint_every=1)) == [True, True]
    _, grads, _ = losses_of(Setup(checkpointing="SELECTIVE", checkpoint_every=2))
    _, plain, _ = losses_of(Setup())
    for name, grad in grads.items():
        assert torch.allclose(grad, plain[name], atol=1e-6), name


def test_op_level_selective_checkpointing_needs_the_selective_contexts():
    setup = Setup(checkpointing="SELECTIVE")
    if hasattr(torch.utils.checkpoint, "create_selective_checkpoint_contexts"):
        _, grads, _ = losses_of(setup)
        assert grads
        return
    with pytest.raises(SpecError) as error:
        Program(spec(), setup, CPU)
    assert str(error.value) == (
        "setup.checkpointing = SELECTIVE with checkpoint_every 0 (op-level) needs "
        "torch.utils.checkpoint.create_selective_checkpoint_contexts (torch >= 2.4), found "
        f"{torch.__version__}; set checkpoint_every 1 .. 4096 for every Nth block")


def test_lora_on_the_head_and_the_embedding():
    # Rank 8 on the head (32 -> 100): A 8 x 32 + B 100 x 8 = 256 + 800 = 1,056.
    # On the embedding (100 x 32): A 8 x 100 + B 32 x 8 = 800 + 256 = 1,056.
    counts = count_params(spec(), Setup(lora_rank=8, lora_targets=["lm_head", "embed"]))
    assert counts["adapter_params"] == 2 * 1056
    assert counts["trainable_params"] == 2 * 1056
    loss, grads, program = losses_of(Setup(lora_rank=8, lora_targets=["lm_head", "embed"]))
    assert isinstance(program.layers[0][0], LoraEmbedding)
    assert grads["layers.0.0.lora_embedding_A"] is not None


@pytest.mark.parametrize("setup,flavour", [
    (Setup(framework="TORCHTUNE"), ("fsdp2", None)),
    (Setup(framework="LITGPT", lora_rank=8), ("fsdp2", None)),
    (Setup(framework="LITGPT"), ("fsdp1", True)),
    (Setup(framework="HF_TRAINER"), ("fsdp1", False)),
    (Setup(), ("fsdp1", None)),
    (Setup(framework="TORCH"), ("fsdp1", None)),
])
def test_the_fsdp_flavour_each_framework_wraps_with(setup, flavour):
    assert frameworks.fsdp_flavour(setup) == flavour


@pytest.mark.parametrize("setup,library,message", [
    (Setup(optimizer="PAGED_ADAMW"), "bitsandbytes",
     "setup.optimizer = PAGED_ADAMW needs bitsandbytes (PagedAdamW, optim_bits 32), which "
     "does not import here"),
    (Setup(optimizer="ADAM4BIT"), "torchao",
     "setup.optimizer = ADAM4BIT needs torchao (torchao.optim.AdamW4bit), which does not "
     "import here"),
    (Setup(optimizer="ADAMFP8"), "torchao",
     "setup.optimizer = ADAMFP8 needs torchao (torchao.optim.AdamWFp8), which does not "
     "import here"),
    (Setup(offload="OPTIMIZER_GRADIENTS"), "torchao",
     "setup.offload = OPTIMIZER_GRADIENTS needs torchao (torchao.optim.CPUOffloadOptimizer("
     "offload_gradients=True)), which does not import here"),
])
def test_an_optimizer_without_its_library_is_refused_clearly(setup, library, message):
    try:
        __import__(library)
        pytest.skip(f"{library} imports here")
    except ImportError:
        pass
    with pytest.raises(SpecError) as error:
        optimizer_impl(setup, CPU)
    assert str(error.value).startswith(message)
    # The batch's failure record says the same.
    with pytest.raises(SpecError) as error:
        one_step(setup)
    assert str(error.value).startswith(message)


def test_a_framework_path_under_ddp_on_two_gloo_ranks(tmp_path, generated_protos):
    """torchtune's LoRA path (fp32, chunked loss, selective checkpointing,
    offloaded activations) as two DDP ranks on the CPU (gloo), launched as
    the worker launches a multi-GPU probe (worker/harness/test_distributed.py
    torchrun): rank 0's result names the profile and the wrapper. (QLoRA
    loads in bf16, which gloo cannot broadcast: that runs on NCCL only.)"""
    import os
    import test_distributed
    if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
        pytest.skip("torch.distributed with gloo is not available")
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(TINY))
    proto_dir = os.path.dirname(os.path.dirname(os.path.dirname(
        generated_protos[0].__file__)))
    setup = {"gpus": 2, "parallel": "DDP", "framework": "TORCHTUNE", "loss": "CHUNKED_CE",
             "checkpointing": "SELECTIVE", "checkpointEvery": 2, "activationOffloading": True,
             "lora": {"rank": 4, "targets": ["all-linear"]}}
    rc, lines, stderr = test_distributed.torchrun(proto_dir, str(path), setup, "2")
    assert rc == 0, stderr
    result = [line for line in lines if line["event"] == "result"][0]
    assert (result["error"], result["world_size"], result["steps"]) == ("", 2, 1)
    assert (result["framework"], result["emulated"], result["wrapped"]) == (
        "torchtune", [], "ddp")
    assert result["load"] == "init on the device under set_default_dtype(float32), state " \
        "dict loaded"


def test_fsdp2_is_refused_where_this_torch_has_no_fully_shard():
    from headroom_harness.distributed import fully_shard_module, parallel_unsupported
    setup = Setup(framework="TORCHTUNE", gpus=2, parallel="FSDP_FULL")
    try:
        fully_shard_module()
    except SpecError as error:
        assert parallel_unsupported(setup) == (
            f"setup.parallel = FSDP_FULL under TORCHTUNE: {error}")
        assert str(error) == (f"FSDP2 (fully_shard) is not in torch {torch.__version__}: "
                              "the framework's FSDP flavour needs torch >= 2.4")
        return
    assert parallel_unsupported(setup) is None
    assert "FSDP2" in parallel_unsupported(dataclasses_replace(setup, parallel="FSDP_GRAD_OP"))


def dataclasses_replace(setup, **fields):
    import dataclasses
    return dataclasses.replace(setup, **fields)
