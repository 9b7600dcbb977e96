"""Reading a training setup: headroom.v1.TrainingSetup as proto3 JSON (what
the worker passes as --setup), checked as the planner's ValidateSetup does,
and the planner's ApplyFreeze on a spec."""

import dataclasses

from headroom_harness.errors import SpecError
from headroom_harness.model_spec import MAX_DIMENSION, MAX_REPEAT, Spec
from headroom_harness.proto import load_proto, message_fields, parse_json

# The planner's limits and names (core/memory/training_setup.{h,cc}).
MAX_LORA_RANK = 4096
MAX_GRAD_ACCUM = 1024
MAX_FREEZE_NAMES = 256
MAX_LORA_TARGETS = 16
LORA_TARGET_NAMES = ("q", "k", "v", "o", "gate", "up", "down")
# Issue 31: LoRA on the output head and the embeddings, by these names
# only (all-linear keeps its meaning: the attention and MLP linears).
LORA_EXTRA_TARGETS = ("lm_head", "embed")
MAX_LOSS_CHUNKS = 4096
MAX_CHECKPOINT_EVERY = 4096


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
    # Issue 30: the caching allocator's expandable segments, the job's
    # phases (JobPhase names; empty: LOAD and STEP), EVAL's batch (0: the
    # training micro-batch) and GENERATE's new tokens.
    expandable_segments: bool = False
    phases: list = dataclasses.field(default_factory=list)
    eval_batch: int = 0
    generate_tokens: int = 0
    # Issue 31 (TrainingSetup fields 34..40): the framework whose path the
    # harness runs (frameworks.py; FRAMEWORK_UNSPECIFIED reads as GENERIC),
    # its version, the loss over the head, activation offloading and
    # checkpointing (CHECKPOINTING_UNSPECIFIED: activation_checkpointing
    # decides).
    framework: str = "GENERIC"
    framework_version: str = ""
    loss: str = "LOSS_UNSPECIFIED"
    loss_chunks: int = 0
    activation_offloading: bool = False
    checkpointing: str = "CHECKPOINTING_UNSPECIFIED"
    checkpoint_every: int = 0

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


def _phase_names(message):
    """setup.phases as JobPhase names; an unknown or unspecified one is
    named with the allowed values."""
    enum = message.DESCRIPTOR.fields_by_name["phases"].enum_type
    allowed = ", ".join(v.name for v in enum.values if v.number != 0)
    names = []
    for i, number in enumerate(message.phases):
        value = enum.values_by_number.get(number)
        if value is None or value.number == 0:
            raise _bad(f"phases[{i}]", value.name if value else number, f"allowed {allowed}")
        names.append(value.name)
    return names


def setup_from_message(message):
    """A Setup from a headroom.v1.TrainingSetup, checked as ValidateSetup."""
    f = message_fields(message, "setup")
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
                  gpus_per_node=f["gpus_per_node"],
                  expandable_segments=f["expandable_segments"],
                  phases=_phase_names(message), eval_batch=f["eval_batch"],
                  generate_tokens=f["generate_tokens"], framework=f["framework"],
                  framework_version=f["framework_version"], loss=f["loss"],
                  loss_chunks=f["loss_chunks"],
                  activation_offloading=f["activation_offloading"],
                  checkpointing=f["checkpointing"], checkpoint_every=f["checkpoint_every"])
    if setup.framework == "FRAMEWORK_UNSPECIFIED":
        setup.framework = "GENERIC"
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
        if (target != "all-linear" and target not in LORA_TARGET_NAMES
                and target not in LORA_EXTRA_TARGETS):
            raise _bad(f"lora.targets[{i}]", f"'{target[:64]}'",
                       "allowed q, k, v, o, gate, up, down, all-linear, lm_head, embed")
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
    _check_issue31(setup)
    _check_parallel(setup)
    return setup


def _check_issue31(setup):
    """The loss, checkpointing and framework_version fields' ranges."""
    if len(setup.framework_version.encode()) > 32:
        raise _bad("framework_version", f"a version of {len(setup.framework_version.encode())} "
                   "bytes", "allowed empty (the profile's newest) or up to 32 bytes")
    if setup.loss_chunks > MAX_LOSS_CHUNKS:
        raise _bad("loss_chunks", setup.loss_chunks,
                   f"allowed 0 (the framework's default) .. {MAX_LOSS_CHUNKS}")
    if setup.loss_chunks and setup.loss != "CHUNKED_CE":
        raise _bad("loss_chunks", setup.loss_chunks, "loss_chunks needs loss CHUNKED_CE")
    if setup.checkpoint_every > MAX_CHECKPOINT_EVERY:
        raise _bad("checkpoint_every", setup.checkpoint_every,
                   f"allowed 0 (op-level) .. {MAX_CHECKPOINT_EVERY}")
    if setup.checkpoint_every and setup.checkpointing != "SELECTIVE":
        raise _bad("checkpoint_every", setup.checkpoint_every,
                   "checkpoint_every needs checkpointing SELECTIVE")
    if setup.checkpointing == "NO_CHECKPOINTING" and setup.activation_checkpointing:
        raise _bad("checkpointing", "NO_CHECKPOINTING", "activation_checkpointing is true: "
                   "set one of them")


def checkpoint_mode(setup):
    """The checkpointing the setup asks for: "none", "full" (every block
    recomputed), "every" (every checkpoint_every-th block) or "op" (op-level
    selective)."""
    mode = setup.checkpointing
    if mode == "CHECKPOINTING_UNSPECIFIED":
        return "full" if setup.activation_checkpointing else "none"
    if mode == "SELECTIVE":
        return "every" if setup.checkpoint_every else "op"
    return {"NO_CHECKPOINTING": "none", "FULL": "full"}[mode]


MAX_GPUS = 512  # kMaxGpus
# Sharding stage per strategy (StrategyStage: ZeRO's numbering).
PARALLEL_STAGE = {"PARALLEL_UNSPECIFIED": 0, "DDP": 0, "FSDP_FULL": 3, "FSDP_GRAD_OP": 2,
                  "FSDP_HYBRID": 3, "ZERO1": 1, "ZERO2": 2, "ZERO3": 3}
# The FSDP strategies the harness runs: torch's ShardingStrategy per value.
FSDP_STRATEGIES = {"FSDP_FULL": "FULL_SHARD", "FSDP_GRAD_OP": "SHARD_GRAD_OP",
                   "FSDP_HYBRID": "HYBRID_SHARD"}


def has_parallel(setup):
    """The planner's HasParallel: more than one GPU, or a strategy, offload,
    tensor parallelism or nodes named."""
    return (setup.gpus > 1 or setup.parallel != "PARALLEL_UNSPECIFIED"
            or setup.offload not in ("OFFLOAD_UNSPECIFIED", "OPTIMIZER_GRADIENTS")
            or setup.tensor_parallel > 1 or setup.nodes > 1)


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
    if setup.offload == "OPTIMIZER_GRADIENTS":
        # torchao's CPUOffloadOptimizer(offload_gradients=True): one GPU, and
        # no accumulation (the gradients leave the GPU after each backward).
        if setup.gpus > 1 or setup.parallel != "PARALLEL_UNSPECIFIED":
            raise _bad("offload", "OPTIMIZER_GRADIENTS", "torchao's CPUOffloadOptimizer runs on "
                       "one GPU: allowed with gpus 0 or 1 and no parallel strategy")
        if setup.grad_accum > 1:
            raise _bad("offload", "OPTIMIZER_GRADIENTS", "offloaded gradients cannot accumulate: "
                       "allowed with grad_accum 0 or 1")
        return
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
    return setup_from_message(parse_json(text, model_pb2.TrainingSetup(), "--setup"))


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
