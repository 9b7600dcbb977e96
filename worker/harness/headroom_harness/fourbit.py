"""QLoRA's 4-bit base linears where their library does not import: the
same tensors and the same operations as bitsandbytes' Linear4bit and
torchao's NF4Tensor, in plain PyTorch, so a probe holds what the library
holds. Each run that uses one says so in its record ("emulated").

Both libraries store a weight the same way: NF4 codes, two per uint8
(numel / 2 bytes), one absmax per 64-value block, the absmaxes themselves
quantized to 8 bits in blocks of 256 with a per-block fp32 scale and one
mean ("double quantization"). Both dequantize the whole weight per matmul
into a temporary of the compute dtype, free it after the matmul, keep only
the packed weight for backward and dequantize it again there:
  - bitsandbytes bitsandbytes/backends/default/ops.py _gemm_4bit_default_impl
    (B_dq = dequantize_4bit(...); linear(A, B_dq)) and
    bitsandbytes/autograd/_functions.py MatMul4Bit (ctx.tensors = (None, B);
    backward: dequantize_4bit(B, ctx.state)) @
    95f9af309d4d5793847169c39288dcd3fcbdf564; bitsandbytes/functional.py
    quantize_4bit: blocksize 64, compress_statistics -> absmax - mean
    quantized in blocks of 256 (quantize_blockwise, a dynamic 8-bit map; here
    a linear int8 map, same bytes). Linear4bit.forward casts the input to
    compute_dtype and the output back (bitsandbytes/nn/modules.py).
  - torchao torchao/quantization/quantize_/workflows/nf4/nf4_tensor.py @
    36027d82d1ad9949597ea16002ff4940374b1b94: to_nf4(block_size=64,
    scaler_block_size=256), double_quantize_scalers (int8 scalers, a
    factor per 256 scalers, their mean), LinearNF4 (save_for_backward(weight);
    forward linear(input, weight.to(input.dtype)); backward
    grad_output @ weight.to(grad_output.dtype)).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

BLOCK = 64          # values per absmax (bitsandbytes blocksize, torchao block_size)
SCALER_BLOCK = 256  # absmaxes per 8-bit scale (compress_statistics, scaler_block_size)

# The 16 NF4 values (torchao nf4_tensor.py NF4Tensor.from_tensor's `nf4`
# table @ 36027d82; bitsandbytes functional.py get_4bit_type("nf4") holds the
# same values to more digits).
NF4 = (-1.0000, -0.6962, -0.5251, -0.3949, -0.2844, -0.1848, -0.0911, 0.0000,
       0.0796, 0.1609, 0.2461, 0.3379, 0.4407, 0.5626, 0.7230, 1.0000)

# Which library's layer each framework's QLoRA uses, and the record's name.
LIBRARY_LAYERS = {"bitsandbytes": "bitsandbytes.Linear4bit",
                  "torchao": "torchao.NF4Tensor"}


def packed_bytes(numel):
    """Bytes of one 4-bit weight as stored: the codes (numel / 2), one int8
    absmax per 64 values, and per 256 absmaxes one fp32 scale, plus the
    fp32 mean. A weight of 4096 x 4096: 8,388,608 + 262,144 + 4,096 + 4."""
    blocks = -(-numel // BLOCK)
    return -(-numel // 2) + blocks + 4 * -(-blocks // SCALER_BLOCK) + 4


# Values converted per piece, so the temporaries of quantizing and
# dequantizing stay a few MB beside the libraries' in-place kernels.
CHUNK = 1 << 20


def _pad(t, multiple):
    extra = -t.numel() % multiple
    return F.pad(t, (0, extra)) if extra else t


def quantize_nf4(weight):
    """(codes uint8 [ceil(numel/2)], absmax int8 [blocks], scale fp32
    [ceil(blocks/256)], mean fp32 []) of a weight, on its device, a piece at
    a time."""
    flat = weight.detach().reshape(-1)
    table = torch.tensor(NF4, device=weight.device)
    midpoints = (table[1:] + table[:-1]) / 2
    packed, absmaxes = [], []
    for start in range(0, flat.numel(), CHUNK):
        piece = _pad(flat[start:start + CHUNK].float(), BLOCK).view(-1, BLOCK)
        absmax = piece.abs().amax(dim=1).clamp_(min=1e-12)
        codes = torch.bucketize(piece / absmax[:, None], midpoints).reshape(-1)
        codes = _pad(codes.to(torch.uint8), 2)
        packed.append((codes[0::2] << 4) | codes[1::2])
        absmaxes.append(absmax)
    blocks = -(-flat.numel() // BLOCK)
    packed = torch.cat(packed)[:-(-flat.numel() // 2)]
    absmax = torch.cat(absmaxes)[:blocks]
    mean = absmax.mean()
    centred = _pad(absmax - mean, SCALER_BLOCK).view(-1, SCALER_BLOCK)
    scale = centred.abs().amax(dim=1).clamp_(min=1e-12) / 127.0
    q_absmax = (centred / scale[:, None]).round_().clamp_(-128, 127).to(torch.int8)
    return packed, q_absmax.reshape(-1)[:blocks], scale, mean


def dequantize_nf4(packed, q_absmax, scale, mean, shape, dtype):
    """The weight of `shape` in `dtype` from quantize_nf4's tensors: a new
    full-size tensor (the temporary each matmul makes), filled a piece at a
    time."""
    numel = 1
    for n in shape:
        numel *= n
    out = torch.empty(numel, dtype=dtype, device=packed.device)
    table = torch.tensor(NF4, device=packed.device)
    absmax = q_absmax.float() * scale.repeat_interleave(SCALER_BLOCK)[:q_absmax.numel()] + mean
    for start in range(0, numel, CHUNK):
        stop = min(start + CHUNK, numel)
        half = packed[start // 2:-(-stop // 2)]
        codes = torch.stack(((half >> 4) & 15, half & 15), dim=1).reshape(-1)[:stop - start]
        values = table[codes.long()]
        block_max = absmax[start // BLOCK:-(-stop // BLOCK)].repeat_interleave(BLOCK)
        out[start:stop] = values * block_max[:stop - start]
    return out.view(shape)


class _Matmul4bit(torch.autograd.Function):
    """linear(x, dequantized W) saving only the packed weight: the
    dequantized copy lives for the matmul only, in forward and backward."""

    @staticmethod
    def forward(ctx, x, layer):
        ctx.layer = layer
        weight = layer.dequantized(x.dtype)
        out = F.linear(x, weight)
        del weight
        return out

    @staticmethod
    def backward(ctx, grad_output):
        weight = ctx.layer.dequantized(grad_output.dtype)
        return grad_output @ weight, None


class Linear4bit(nn.Module):
    """A frozen NF4 base linear as `library` ("bitsandbytes" or "torchao")
    holds and runs it. The packed tensors are buffers (never trained); the
    bias stays a 16-bit parameter. bitsandbytes computes in compute_dtype
    (the input cast to it, the output cast back); torchao in the input's
    dtype."""

    def __init__(self, in_features, out_features, bias, library, compute_dtype, device,
                 dtype=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.library = library
        self.compute_dtype = compute_dtype if library == "bitsandbytes" else None
        # The dtype its checkpoint weight arrives in, before quantizing.
        self.weight_dtype = dtype or torch.bfloat16
        numel = in_features * out_features
        blocks = -(-numel // BLOCK)
        self.register_buffer("packed", torch.zeros(-(-numel // 2), dtype=torch.uint8,
                                                   device=device))
        self.register_buffer("absmax", torch.zeros(blocks, dtype=torch.int8, device=device))
        self.register_buffer("scale", torch.zeros(-(-blocks // SCALER_BLOCK),
                                                  dtype=torch.float32, device=device))
        self.register_buffer("mean", torch.zeros((), dtype=torch.float32, device=device))
        self.bias = (nn.Parameter(torch.zeros(out_features, device=device, dtype=dtype),
                                  requires_grad=False) if bias else None)

    @property
    def emulates(self):
        return LIBRARY_LAYERS[self.library]

    def load_weight(self, weight, bias=None):
        """Quantizes a 16- or 32-bit weight (on this layer's device) into
        the packed buffers and copies the bias; the caller frees the
        weight."""
        packed, absmax, scale, mean = quantize_nf4(weight)
        self.packed.copy_(packed)
        self.absmax.copy_(absmax)
        self.scale.copy_(scale)
        self.mean.copy_(mean)
        if bias is not None and self.bias is not None:
            with torch.no_grad():
                self.bias.copy_(bias)

    def dequantized(self, dtype):
        return dequantize_nf4(self.packed, self.absmax, self.scale, self.mean,
                              (self.out_features, self.in_features), dtype)

    def forward(self, x):
        in_dtype = x.dtype
        if self.compute_dtype is not None:
            x = x.to(self.compute_dtype)
        out = _Matmul4bit.apply(x, self)
        if self.bias is not None:
            out = out + self.bias.to(out.dtype)
        return out.to(in_dtype)


def _torchao_nf4():
    """(to_nf4, linear_nf4) from torchao (torchtune's imports @ bd2a0fc7,
    then the older torchao.dtypes path), or None."""
    try:
        from torchao.quantization import to_nf4
        from torchao.quantization.quantize_.workflows.nf4.nf4_tensor import linear_nf4
        return to_nf4, linear_nf4
    except ImportError:
        pass
    try:
        from torchao.dtypes.nf4tensor import linear_nf4, to_nf4
        return to_nf4, linear_nf4
    except ImportError:
        return None


class TorchaoNF4Linear(nn.Module):
    """torchtune's FrozenNF4Linear / LoRALinear(quantize_base) base with
    torchao itself: the weight an NF4Tensor made by to_nf4 on load, the
    forward linear_nf4 (modules/low_precision/nf4_linear.py @ bd2a0fc7)."""

    emulates = None

    def __init__(self, in_features, out_features, bias, device, dtype):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight_dtype = dtype
        self.weight = None
        self.bias = (nn.Parameter(torch.zeros(out_features, device=device, dtype=dtype),
                                  requires_grad=False) if bias else None)

    def load_weight(self, weight, bias=None):
        to_nf4, _ = _torchao_nf4()
        self.weight = nn.Parameter(to_nf4(weight), requires_grad=False)
        if bias is not None and self.bias is not None:
            with torch.no_grad():
                self.bias.copy_(bias)

    def forward(self, x):
        _, linear_nf4 = _torchao_nf4()
        out = linear_nf4(input=x, weight=self.weight)
        return out if self.bias is None else out + self.bias


class BitsandbytesLinear4bit(nn.Module):
    """bitsandbytes' own Linear4bit (NF4, double quantization, bf16
    compute) filled as transformers loads it: Params4bit(the 16-bit value
    on the CPU).to(device), which quantizes it there
    (set_module_quantized_tensor_to_device, huggingface/transformers
    src/transformers/integrations/bitsandbytes.py @
    01ae98ae2414210efd0d9ac1ffe78ff21588f1f7)."""

    emulates = None

    def __init__(self, in_features, out_features, bias, device, dtype):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight_dtype = dtype
        self.has_bias = bias
        # Made by load_weight, so materializing the model (to_empty) never
        # touches bitsandbytes' parameters.
        self.inner = None

    def load_weight(self, weight, bias=None):
        import bitsandbytes as bnb
        inner = bnb.nn.Linear4bit(self.in_features, self.out_features, bias=self.has_bias,
                                  compute_dtype=torch.bfloat16, compress_statistics=True,
                                  quant_type="nf4", device="meta")
        inner.weight = bnb.nn.Params4bit(weight.to("cpu"), requires_grad=False,
                                         compress_statistics=True,
                                         quant_type="nf4").to(weight.device)
        if self.has_bias:
            inner.bias = nn.Parameter(
                (bias if bias is not None else torch.zeros(self.out_features)).to(
                    weight.device, self.weight_dtype), requires_grad=False)
        self.inner = inner

    def forward(self, x):
        return self.inner(x)


def library_imports(library):
    """Whether the library itself runs here (then nothing is emulated)."""
    if library == "torchao":
        return _torchao_nf4() is not None
    try:
        import bitsandbytes  # noqa: F401
        return True
    except ImportError:
        return False


def base_layer(in_features, out_features, bias, library, device, dtype):
    """The frozen 4-bit base linear a framework's QLoRA holds: the library's
    own where it imports, else Linear4bit emulating it."""
    if library_imports(library):
        cls = TorchaoNF4Linear if library == "torchao" else BitsandbytesLinear4bit
        return cls(in_features, out_features, bias, device, dtype)
    return Linear4bit(in_features, out_features, bias, library, torch.bfloat16, device, dtype)
