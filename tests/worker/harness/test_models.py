"""headroom_harness.models and program: parameter counts worked out by hand
and one training step on the CPU (needs torch; skipped without it)."""

import json

import pytest

torch = pytest.importorskip("torch", reason="the torch modules need torch")

from headroom_harness.model_spec import parse_spec  # noqa: E402
from headroom_harness.models import count_params  # noqa: E402
from headroom_harness.program import Program, Unit  # noqa: E402
from headroom_harness.setups import Setup  # noqa: E402
from test_wiring import LM  # noqa: E402

pytestmark = pytest.mark.usefixtures("generated_protos")

# LM by hand: embedding 100 x 32 = 3,200; per block copy an RMS weight (32)
# and q, k, v, o of 32 x 32 without biases (4,096): 4,128, twice; the head
# 32 x 100 without bias: 3,200. A LoRA adapter of rank 8 on a 32 x 32 linear:
# A 8 x 32 + B 32 x 8 = 512.
LM_PARAMS = 3_200 + 2 * 4_128 + 3_200


def counts(setup):
    return count_params(parse_spec(json.dumps(LM), "lm"), setup)


def test_the_base_model():
    assert counts(Setup()) == {"params": LM_PARAMS, "trainable_params": LM_PARAMS,
                               "frozen_params": 0, "adapter_params": 0,
                               "quantized_params": 0}


def test_lora_on_q_and_v_freezes_every_base_weight():
    assert LM_PARAMS == 14_656
    assert counts(Setup(lora_rank=8)) == {"params": 14_656, "trainable_params": 2 * 2 * 512,
                                          "frozen_params": 14_656, "adapter_params": 2048,
                                          "quantized_params": 0}


def test_qlora_on_all_linears_counts_the_weights_it_would_quantize():
    # q, k, v, o of both copies are quantized and adapted; the logits head
    # is neither (the planner's kHead).
    got = counts(Setup(lora_rank=8, lora_targets=["all-linear"], quant_base="NF4"))
    assert (got["adapter_params"], got["quantized_params"]) == (2 * 4 * 512, 2 * 4 * 1024)


def test_one_step_on_the_cpu_and_fsdp_units():
    spec = parse_spec(json.dumps(LM), "lm")
    torch.manual_seed(0)
    program = Program(spec, Setup(), torch.device("cpu"), fsdp_units=True)
    assert sum(1 for m in program.modules() if isinstance(m, Unit)) == 2
    loss = program(program.make_batch(2, torch.device("cpu")))
    loss.backward()
    assert loss.item() > 0
    assert all(p.grad is not None for p in program.parameters())
