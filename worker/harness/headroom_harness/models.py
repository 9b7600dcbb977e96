"""The torch modules of a spec: one per layer copy, with parameters exactly
as the planner counts them, under the setup's freeze, LoRA and QLoRA."""

import dataclasses
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from headroom_harness.errors import SpecError
from headroom_harness.model_spec import Spec
from headroom_harness.setups import Setup, apply_freeze, lora_targets
from headroom_harness.torch_support import HAS_SDPA


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
        self.in_features, self.out_features = embedding.weight.shape[1], out_features
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
                # The output head is never quantized (kHead); LoRA adapts it
                # only when lora.targets names lm_head.
                module.headroom_target = "lm_head" if f["logits"] else "linear"
                return module
            for embedding in reversed(self.embeddings):
                if tuple(embedding.weight.shape) == (f["out_features"], f["in_features"]):
                    module = TiedLinear(embedding, f["bias"], d)
                    module.headroom_target = "lm_head"
                    return module
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


class LoraEmbedding(nn.Module):
    """PEFT's LoRA Embedding in plain PyTorch (lora.targets embed): the
    frozen base table plus embedding(ids, A^T) @ B^T * alpha / r, with
    lora_embedding_A [r, num_embeddings] (zeros) and lora_embedding_B
    [dim, r] (normal), fp32 as PEFT creates them."""

    def __init__(self, base, rank, device):
        super().__init__()
        self.base = base
        base.requires_grad_(False)
        self.lora_embedding_A = nn.Parameter(torch.zeros(rank, base.num_embeddings,
                                                         device=device, dtype=torch.float32))
        self.lora_embedding_B = nn.Parameter(torch.empty(base.embedding_dim, rank,
                                                         device=device, dtype=torch.float32))
        if device.type != "meta":
            nn.init.normal_(self.lora_embedding_B)
        for p in (self.lora_embedding_A, self.lora_embedding_B):
            p.headroom_adapter = True
        self.scaling = LoraLinear.ALPHA / rank

    @property
    def weight(self):
        return self.base.weight

    def forward(self, ids):
        result = self.base(ids)
        after_a = F.embedding(ids, self.lora_embedding_A.t())
        return (result + (after_a @ self.lora_embedding_B.t()) * self.scaling).to(result.dtype)


def _linear_shape(module):
    """(in_features, out_features) of an nn.Linear, a tied head or a
    bitsandbytes one."""
    return module.in_features, module.out_features


def _targeted(modules, heads=False):
    """(parent, child name, linear) for every linear the planner's rules
    call kLinear (param_tensors.cc): attention q, k, v, o, MLP and expert
    gate, up, down, standalone non-logits linears; never a router, and the
    output head (tied or not) only with `heads` (LoRA's lm_head target;
    never quantized)."""
    out = []
    for parent in modules.modules():
        for name, child in parent._modules.items():
            target = getattr(child, "headroom_target", "")
            if not target or (target == "lm_head" and not heads):
                continue
            if isinstance(child, (nn.Linear, TiedLinear)):
                out.append((parent, name, child))
    return out


def _embeddings(modules):
    """(parent, child name, embedding) for every embedding table (LoRA's
    embed target)."""
    return [(parent, name, child) for parent in modules.modules()
            for name, child in parent._modules.items() if isinstance(child, nn.Embedding)]


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
        for parent, name, linear in _targeted(copies, heads="lm_head" in targets):
            if linear.headroom_target not in targets:
                continue
            quantized_base = (quantizing and quantize and linear.headroom_target != "lm_head")
            base = _quantize_linear(linear, setup.quant_base, device) \
                if quantized_base else linear
            parent._modules[name] = LoraLinear(base, setup.lora_rank, setup.lora_dropout,
                                               device)
        if "embed" in targets:
            for parent, name, embedding in _embeddings(copies):
                parent._modules[name] = LoraEmbedding(embedding, setup.lora_rank, device)
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
