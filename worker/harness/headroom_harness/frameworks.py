"""Each framework profile's path through a probe (TrainingSetup.framework):
how the framework loads the model, which QLoRA layer it uses, which FSDP
it wraps with and its chunked loss. GENERIC, TORCH and DEEPSPEED keep the
harness's own path (built on the device in fp32, cast for *_TRUE); the
others follow their framework's source, cited at a commit per rule. What a
path ran in plain PyTorch because the library does not import here is
listed in the run's record ("emulated")."""

import contextlib
import dataclasses

import torch
import torch.nn as nn

from headroom_harness import fourbit, losses
from headroom_harness.errors import SpecError
from headroom_harness.models import LoraEmbedding, LoraLinear, _targeted
from headroom_harness.program import Program

# TrainingSetup.Framework names and the profile names answers use.
FRAMEWORKS = {"GENERIC": "generic", "HF_TRAINER": "hf-trainer", "LITGPT": "litgpt",
              "TORCHTUNE": "torchtune", "DEEPSPEED": "deepspeed", "TORCH": "torch"}

# CHUNKED_CE's default pieces: torchtune's 8 (losses.TORCHTUNE_CHUNKS);
# litgpt chunks by size, not count: model(input_ids, lm_head_chunk_size=128)
# and chunked_cross_entropy (litgpt/finetune/lora.py, litgpt/utils.py @
# 26857050fe3ff627cd714fe92f5838f51a3d5efa).
TORCHTUNE_CHUNKS = losses.TORCHTUNE_CHUNKS
LITGPT_CHUNK_POSITIONS = 128


def framework_profile(setup):
    """The profile name of setup.framework ("generic" for GENERIC);
    SpecError naming the field and the allowed values for anything else."""
    name = FRAMEWORKS.get(setup.framework)
    if name is None:
        raise SpecError(f"setup.framework = {setup.framework} is unknown; allowed "
                        f"{', '.join(FRAMEWORKS)}")
    return name


@dataclasses.dataclass
class Loaded:
    """A loaded program and what its load did: `emulated` names each
    library layer run in plain PyTorch ("bitsandbytes.Linear4bit"),
    `load` says how the weights came to the device."""
    program: Program
    emulated: list
    load: str


@contextlib.contextmanager
def default_dtype(dtype):
    """torch.set_default_dtype for a block, as torchtune's
    training.set_default_dtype and transformers' _set_default_torch_dtype
    create the modules in the load dtype."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def _true_half(setup):
    return {"BF16_TRUE": torch.bfloat16, "FP16_TRUE": torch.float16}.get(setup.precision)


def _quantized(setup):
    return setup.quant_base != "BASE_QUANT_UNSPECIFIED"


def load_dtype(setup):
    """The dtype a framework path creates the base weights in: the 16-bit
    dtype of a *_TRUE precision, bf16 for QLoRA's unquantized weights (the
    compute dtype the harness gives QLoRA, phases.py), else fp32."""
    return _true_half(setup) or (torch.bfloat16 if _quantized(setup) else torch.float32)


# A checkpoint's values: the usual initializer_range of a transformer's
# config for matrices and tables; norms 1, biases and running means 0.
CHECKPOINT_STD = 0.02


class Checkpoint:
    """The "checkpoint file": the base model's tensors (no adapters, no
    quantization), keyed as the adapted model names them less the adapters'
    `.base`, each made when read, in fp32 on the host, the same values on
    every read (seeded by its key's position). Frameworks read it from an
    mmap'd file; it is never all in memory at once here either."""

    def __init__(self, spec, setup, fsdp_units=False):
        base = dataclasses.replace(setup, lora_rank=0, lora_targets=[], lora_dropout=0.0,
                                   quant_base="BASE_QUANT_UNSPECIFIED")
        program = Program(spec, base, torch.device("meta"), fsdp_units=fsdp_units)
        modules = dict(program.named_modules())
        self._tensors = {}
        for i, (name, tensor) in enumerate(program.state_dict(keep_vars=True).items()):
            owner, _, leaf = name.rpartition(".")
            self._tensors[name] = (i, tuple(tensor.shape), _fill(modules.get(owner), leaf,
                                                                 tensor))

    def __contains__(self, key):
        return key in self._tensors

    def get(self, key, default=None):
        return self[key] if key in self._tensors else default

    def __getitem__(self, key):
        index, shape, fill = self._tensors[key]
        if fill != "normal":
            return torch.full(shape, float(fill))
        generator = torch.Generator().manual_seed(index)
        return torch.randn(shape, generator=generator) * CHECKPOINT_STD


def _fill(module, leaf, tensor):
    """How a checkpoint tensor is filled: "normal" (std 0.02) or a value."""
    if leaf in ("bias", "running_mean"):
        return 0.0
    if leaf == "running_var" or leaf in ("q_norm", "k_norm"):
        return 1.0
    if type(module).__name__ == "Norm" and leaf == "weight":
        return 1.0
    return "normal"


def checkpoint_state(spec, setup, fsdp_units=False):
    """The setup's base model's Checkpoint."""
    return Checkpoint(spec, setup, fsdp_units)


def _checkpoint_key(name):
    return name.replace(".base.", ".")


def _swap_quantized(program, setup, library, device):
    """Replaces every quantized target base linear (the planner's kLinear,
    never the head) by `library`'s 4-bit layer, empty, on `device`: the
    library's own where it imports, else fourbit.Linear4bit emulating it.
    Returns the emulated layer names (one entry, or none)."""
    if not _quantized(setup):
        return []
    if setup.quant_base != "NF4":
        raise SpecError(f"setup.quant_base = {setup.quant_base} under framework "
                        f"{setup.framework}: its QLoRA path quantizes NF4 only; allowed NF4")
    emulated = set()
    for parent, name, linear in _targeted(program.layers):
        if hasattr(linear, "load_weight"):
            continue
        layer = fourbit.base_layer(linear.in_features, linear.out_features,
                                   linear.bias is not None, library, device, load_dtype(setup))
        layer.headroom_target = linear.headroom_target
        parent._modules[name] = layer
        if layer.emulates:
            emulated.add(layer.emulates)
    return sorted(emulated)


def _reset_adapters(program, dtype=None):
    """Adapters as PEFT and torchtune initialize them (A Kaiming-uniform,
    B zeros; an embedding's A zeros, B normal), after a meta build or an
    empty materialization; in `dtype` when given (torchtune builds them under
    its default dtype)."""
    for module in program.modules():
        if isinstance(module, LoraLinear):
            if dtype is not None:
                module.lora_A.to(dtype)
                module.lora_B.to(dtype)
            nn.init.kaiming_uniform_(module.lora_A.weight, a=5 ** 0.5)
            nn.init.zeros_(module.lora_B.weight)
        elif isinstance(module, LoraEmbedding):
            if dtype is not None:
                module.lora_embedding_A.data = module.lora_embedding_A.data.to(dtype)
                module.lora_embedding_B.data = module.lora_embedding_B.data.to(dtype)
            with torch.no_grad():
                module.lora_embedding_A.zero_()
                nn.init.normal_(module.lora_embedding_B)


def _load_tensors(program, state, device):
    """Copies the checkpoint into the program one tensor at a time, as
    load_state_dict does (each tensor converted to the parameter's dtype on
    its device). A 4-bit layer (one with load_weight) gets its weight moved
    to the device in 16 bits and quantized there, then freed, and its bias.
    Adapters are not in the checkpoint."""
    quantized = {name: module for name, module in program.named_modules()
                 if hasattr(module, "load_weight")}
    for name, module in quantized.items():
        weight = state[_checkpoint_key(name + ".weight")].to(device=device,
                                                             dtype=module.weight_dtype)
        bias = state.get(_checkpoint_key(name + ".bias"))
        module.load_weight(weight, None if bias is None else bias.to(device))
        del weight
    for name, tensor in program.state_dict(keep_vars=True).items():
        if any(name.startswith(prefix + ".") for prefix in quantized):
            continue
        key = _checkpoint_key(name)
        if key in state:  # else an adapter
            with torch.no_grad():
                tensor.copy_(state[key])


def _materialize(program, device):
    """Module.to_empty onto the device (storage, no values). A tied head
    holds the embedding's Parameter object, so it stays shared."""
    program.to_empty(device=device)


def load_generic(spec, setup, device, fsdp_units=False, host_build=False):
    """GENERIC, TORCH and DEEPSPEED: the harness's own path (phases.py
    before issue 31): built on the device in fp32 (on the host when FSDP
    offloads the weights), QLoRA through bitsandbytes when it imports,
    model.to(16-bit) for *_TRUE."""
    build = torch.device("cpu") if host_build else device
    program = Program(spec, setup, build, quantize=_quantized(setup), fsdp_units=fsdp_units)
    if _true_half(setup) is not None:
        program.to_true_half(_true_half(setup))
    return Loaded(program, [], "built on the device in fp32" +
                  (", cast to 16 bits (model.to)" if _true_half(setup) else ""))


def load_hf_trainer(spec, setup, device, fsdp_units=False):
    """transformers' from_pretrained: the model created without storage
    (accelerate's init_empty_weights, here the meta device) in torch_dtype,
    QLoRA's linears replaced by bitsandbytes Linear4bit before loading
    (replace_with_bnb_linear, lm_head kept), then each checkpoint tensor
    set on the device: a quantized one as Params4bit(value on the CPU)
    .to(device), which quantizes it there, one tensor at a time
    (set_module_quantized_tensor_to_device). huggingface/transformers
    src/transformers/integrations/bitsandbytes.py @
    01ae98ae2414210efd0d9ac1ffe78ff21588f1f7. PEFT then adds fp32
    adapters."""
    dtype = load_dtype(setup)
    with default_dtype(dtype):
        program = Program(spec, setup, torch.device("meta"), fsdp_units=fsdp_units)
    emulated = _swap_quantized(program, setup, "bitsandbytes", torch.device("meta"))
    state = checkpoint_state(spec, setup, fsdp_units)
    _materialize(program, device)
    _load_tensors(program, state, device)
    del state
    _reset_adapters(program)
    program.input_dtype = dtype
    return Loaded(program, emulated, f"meta init in {_dtype_name(dtype)}, loaded tensor by "
                  "tensor" + (", quantized on load" if emulated else ""))


def load_litgpt(spec, setup, device, fsdp_units=False):
    """litgpt: `with fabric.init_module(empty_init=(fabric.world_size > 1)):
    model = GPT(config)` then load_checkpoint(fabric, model, path,
    strict=False) (litgpt/finetune/lora.py @
    26857050fe3ff627cd714fe92f5838f51a3d5efa): on one device the model is
    created on it in the precision's dtype (bf16-true: bf16), under several
    processes on the meta device; QLoRA (--quantize bnb.nf4, the
    BitsandbytesPrecision plugin) makes Lightning's _Linear4bit, which
    quantizes at init on CUDA and again as the state dict loads
    (_quantize_on_load_hook; Lightning-AI/pytorch-lightning
    src/lightning/fabric/plugins/precision/bitsandbytes.py @
    d9ff9f3b62d77dd89592d92b018d96d5dfe1aae8). Adapters follow the model's
    dtype (the whole model is cast). A quantized model is built on meta
    here and each 4-bit layer filled as it loads: one 16-bit weight on the
    device at a time, as quantizing at init does."""
    dtype = load_dtype(setup)
    build = torch.device("meta") if fsdp_units or _quantized(setup) else device
    with default_dtype(dtype):
        program = Program(spec, setup, build, fsdp_units=fsdp_units)
    emulated = _swap_quantized(program, setup, "bitsandbytes", build)
    state = checkpoint_state(spec, setup, fsdp_units)
    if build.type == "meta":
        _materialize(program, device)
    _load_tensors(program, state, device)
    del state
    _reset_adapters(program, dtype)
    program.input_dtype = dtype
    where = "init on the device" if build.type != "meta" else (
        "meta init (several processes)" if fsdp_units else "4-bit layers made as they load")
    return Loaded(program, emulated, f"{where} in {_dtype_name(dtype)}, load_checkpoint" +
                  (", quantized at init and on load" if emulated else ""))


def load_torchtune(spec, setup, device, fsdp_units=False):
    """torchtune: the model instantiated under training.set_default_dtype
    (bf16) on the device (lora_finetune_single_device.py _setup_model) or
    on torch.device("meta") (lora_finetune_distributed.py), QLoRA's base
    weights converted by to_nf4 at construction (modules/peft/lora.py
    LoRALinear with quantize_base) and again on load
    (training/_distributed.py load_from_full_model_state_dict: to_nf4 per
    parameter), the base state dict loaded with strict=False; adapters in
    the default dtype. pytorch/torchtune @
    bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1. A quantized model is built on
    meta here and each NF4 weight made as it loads (one 16-bit weight on
    the device at a time, as to_nf4 at construction)."""
    dtype = load_dtype(setup)
    build = torch.device("meta") if fsdp_units or _quantized(setup) else device
    with default_dtype(dtype):
        program = Program(spec, setup, build, fsdp_units=fsdp_units)
    emulated = _swap_quantized(program, setup, "torchao", build)
    state = checkpoint_state(spec, setup, fsdp_units)
    if build.type == "meta":
        _materialize(program, device)
    _load_tensors(program, state, device)
    del state
    _reset_adapters(program, dtype)
    program.input_dtype = dtype
    where = "init on the device" if build.type != "meta" else (
        "meta init" if fsdp_units else "NF4 layers made as they load")
    return Loaded(program, emulated, f"{where} under set_default_dtype("
                  f"{_dtype_name(dtype)}), state dict loaded" +
                  (", base weights to_nf4" if emulated else ""))


def _dtype_name(dtype):
    return str(dtype).replace("torch.", "")


LOADERS = {"hf-trainer": load_hf_trainer, "litgpt": load_litgpt, "torchtune": load_torchtune}


def load(spec, setup, device, fsdp_units=False, host_build=False):
    """The setup's framework's load: a Loaded (program on `device`, what was
    emulated, how it loaded)."""
    name = framework_profile(setup)
    loader = LOADERS.get(name)
    if loader is None:
        return load_generic(spec, setup, device, fsdp_units, host_build)
    if host_build:
        raise SpecError(f"setup.offload = {setup.offload} with framework {setup.framework}: "
                        "the harness offloads FSDP weights on its own path only; allowed "
                        "framework GENERIC or TORCH")
    return loader(spec, setup, device, fsdp_units)


def loss_chunks(setup, positions):
    """How many pieces CHUNKED_CE splits the sequence into: loss_chunks when
    set, else the framework's default (torchtune 8; litgpt one per 128
    positions; others torchtune's 8); 0 for the full loss."""
    if setup.loss != "CHUNKED_CE":
        return 0
    if setup.loss_chunks:
        return setup.loss_chunks
    if setup.framework == "LITGPT":
        return max(1, -(-positions // LITGPT_CHUNK_POSITIONS))
    return TORCHTUNE_CHUNKS


def fsdp_flavour(setup):
    """(flavour, use_orig_params) of the FSDP the framework wraps with:
    "fsdp1" (FullyShardedDataParallel, flat parameters) or "fsdp2"
    (fully_shard per parameter; use_orig_params None).
      - torchtune: fully_shard (training/_distributed.py shard_model @
        bd2a0fc7).
      - litgpt: LoRA fully_shard per trainable Linear and Block
        (finetune/lora.py parallelize_fn @ 26857050); full fine-tuning
        Fabric's FSDPStrategy (finetune/full.py), which sets
        use_orig_params True (Lightning-AI/pytorch-lightning
        src/lightning/fabric/strategies/fsdp.py @
        00608a3818370391bd585960fa6cce18d21617b2).
      - hf-trainer: accelerate's FullyShardedDataParallelPlugin,
        fsdp_version 1, use_orig_params False unless set
        (huggingface/accelerate src/accelerate/utils/dataclasses.py @
        16cb6eb80dd9aa8b4df1a63ef57863e455d53b83).
      - generic, torch: FSDP1, use_orig_params only where it must be (mixed
        requires_grad, torch.compile): None here, decided at wrap time."""
    name = framework_profile(setup)
    if name == "torchtune" or (name == "litgpt" and setup.lora_rank):
        return "fsdp2", None
    if name == "litgpt":
        return "fsdp1", True
    if name == "hf-trainer":
        return "fsdp1", False
    return "fsdp1", None
