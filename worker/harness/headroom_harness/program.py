"""The program: a spec's modules and its data flow as one nn.Module whose
forward is one training step's forward and loss."""

import contextlib

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils import checkpoint as torch_checkpoint

from headroom_harness import losses
from headroom_harness.activations import OffloadActivations, op_level_context, selective_every
from headroom_harness.errors import SpecError
from headroom_harness.models import LoraLinear, attention_mode, build_model
from headroom_harness.setups import checkpoint_mode
from headroom_harness.wiring import Op, Segment, Wiring, prod


def _activation(name):
    """The activation a layer's name says (relu1, quick_gelu, silu_gate...);
    GELU when it says none."""
    n = name.lower()
    if "quick_gelu" in n:
        return lambda x: x * torch.sigmoid(1.702 * x)
    for key, fn in (("gelu", F.gelu), ("silu", F.silu), ("swish", F.silu),
                    ("relu", F.relu), ("elu", F.elu),
                    ("tanh", torch.tanh), ("sigmoid", torch.sigmoid),
                    ("l2norm", lambda x: F.normalize(x, dim=-1))):
        if key in n:
            return fn
    return F.gelu


def _apply_step(t, step):
    name, b = step[0], t.shape[0]
    if name == "to_tokens":
        return t.flatten(2).transpose(1, 2)
    if name == "to_spatial":
        return t.transpose(1, 2).reshape(b, t.shape[2], *step[1])
    if name == "regrid":
        return t.reshape(b, t.shape[1], *step[1])
    if name == "reshape":
        return t.reshape(b, step[1], step[2])
    if name == "flatten":
        return t.reshape(b, 1, -1)
    # Slices are copied: a layer that saves its input would otherwise keep
    # the whole sliced tensor alive until backward.
    if name == "take_positions":
        return t[:, :step[1]].contiguous()
    if name == "repeat_positions":
        return t.repeat_interleave(step[1], dim=1)
    if name == "pad_positions":
        return F.pad(t, (0, 0, 0, step[1]))
    if name == "take_width":
        return t[..., :step[1]].contiguous()
    if name == "pad_width":
        return F.pad(t, (0, step[1]))
    if name == "take_channels":
        return t[:, :step[1]].contiguous()
    if name == "pad_channels":
        return F.pad(t, [0, 0] * (t.dim() - 2) + [0, step[1]])
    if name == "resize":
        grid = step[1]
        if prod(grid) >= prod(t.shape[2:]):
            return F.interpolate(t, size=grid, mode="nearest")
        return {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d,
                3: F.adaptive_avg_pool3d}[len(grid)](t, grid)
    raise AssertionError(name)


class Unit(nn.Module):
    """One FSDP wrapped unit: a copy of a top-level repeated layer. Its
    forward runs that copy's ops (the Program's segment function), so FSDP's
    pre-forward gathers exactly this copy's parameters around them."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, run, checkpoint, *tensors):
        """`checkpoint`: None (run as is) or checkpoint()'s keyword
        arguments."""
        if checkpoint:
            return torch_checkpoint.checkpoint(run, *tensors, **checkpoint)
        return run(*tensors)


class Program(nn.Module):
    """The spec's model on a device: forward(data) returns the step's loss.
    With fsdp_units each copy of a top-level repeated layer sits in a Unit
    (for FSDP's auto-wrap policy) and runs through it."""

    def __init__(self, spec, setup, device, quantize=False, fsdp_units=False):
        super().__init__()
        built = build_model(spec, device, setup, quantize)
        self.layers = built.modules
        spec = built.spec  # freeze applied
        wiring = Wiring(spec, setup)
        mode = checkpoint_mode(setup)
        self.units, self.final = wiring.plan(self.layers, mode != "none", fsdp_units)
        # checkpoint()'s arguments for a checkpointed segment (op-level: the
        # selective context); every Nth: the others run as they are.
        self.checkpoint_kwargs = {"use_reentrant": False}
        if mode == "op":
            self.checkpoint_kwargs["context_fn"] = op_level_context()
        elif mode == "every":
            selective_every([u for u in self.units if isinstance(u, Segment) and u.checkpoint],
                            setup.checkpoint_every)
        # CHUNKED_CE (set_chunked_loss): the logits heads run in the loss.
        self.chunked = None
        self.heads = {}
        # activation_offloading: the hooks of the last forward (their
        # offloaded_bytes), None when off.
        self.offload = setup.activation_offloading
        self.offloader = None
        if fsdp_units:
            # After planning: the ops keep the leaf modules, which stay the
            # same objects inside the Unit (and inside FSDP's wrapper).
            for copies, layer in zip(self.layers, spec.layers):
                if (layer.repeat or 1) > 1:
                    for j in range(len(copies)):
                        copies[j] = Unit(copies[j])
        self.values = wiring.values
        self.device = device
        self._defer_heads(setup)
        loss_reads = [vid for op in self.heads.values() for vid in _unit_reads(op)]
        _finish_segments(self.units, self.final, loss_reads)
        keep = ({v.vid for v in self.final} | {v.vid for v in wiring.inputs}
                | set(loss_reads))
        self.free_after = _liveness(self.units, keep)
        self.inputs = wiring.inputs
        self.setup = setup
        self.input_dtype = torch.float32

    def to_true_half(self, dtype):
        """model.to(dtype) for the base model, as bf16-true / fp16-true
        training does; LoRA adapters stay fp32 (PEFT's default) and
        bitsandbytes' quantized weights stay as they are."""
        for module in self.modules():
            if isinstance(module, LoraLinear):
                continue
            for name, param in module._parameters.items():
                if (param is not None and param.is_floating_point()
                        and not getattr(param, "headroom_adapter", False)
                        and type(param) is nn.Parameter):
                    module._parameters[name] = nn.Parameter(param.data.to(dtype),
                                                            requires_grad=param.requires_grad)
            for name, buf in module._buffers.items():
                if buf is not None and buf.is_floating_point():
                    module._buffers[name] = buf.to(dtype)
        self.input_dtype = dtype

    def make_batch(self, batch, device):
        """Synthetic inputs: random floats, token ids and loss targets."""
        data = {}
        for v in self.inputs:
            s = v.shape
            if v.make[0] == "float":
                shape = ((batch, s.width) + tuple(s.grid) if s.layout == "spatial"
                         else (batch, s.positions, s.width))
                data[v.vid] = torch.randn(shape, device=device, dtype=self.input_dtype)
            elif v.make[0] == "ids":
                shape = (batch, s.positions) if s.width == 1 else (batch, s.positions, s.width)
                data[v.vid] = torch.randint(0, v.make[1], shape, device=device)
            else:
                data[v.vid] = torch.randint(0, v.make[1], (batch * s.positions,), device=device)
        return data

    def _defer_heads(self, setup):
        """Under CHUNKED_CE the top-level linears that make logits leave the
        forward: the loss runs them chunk by chunk (losses.py)."""
        if setup.loss != "CHUNKED_CE":
            return
        logits = {v.vid for v in self.final if v.logits}
        for unit in list(self.units):
            if isinstance(unit, Op) and unit.kind == "linear" and unit.out in logits:
                self.heads[unit.out] = unit
                self.units.remove(unit)
        if not self.heads:
            raise SpecError("setup.loss = CHUNKED_CE needs a top-level linear layer with "
                            "logits set (the output head); this spec has none outside a "
                            "block: allowed loss FULL_CE")

    def set_chunked_loss(self, style, chunks):
        """CHUNKED_CE as `style` ("torchtune": `chunks` pieces; "litgpt":
        pieces of `chunks` positions)."""
        self.chunked = (style, chunks)

    def forward(self, data):
        env = dict(data)
        self.offloader = OffloadActivations(self.device) if self.offload else None
        # torchtune offloads the model's forward, not the output head's.
        with self.offloader if self.offloader is not None else contextlib.nullcontext():
            self._body(env)
        loss = None
        for v in self.final:
            if v.vid in self.heads:
                term = self._chunked_term(self.heads[v.vid], env, env[v.targets])
            elif v.logits:
                term = losses.full_ce(env[v.vid], env[v.targets])
            else:
                term = env[v.vid].float().mean()
            loss = term if loss is None else loss + term
        return loss

    def _body(self, env):
        for unit, free in zip(self.units, self.free_after):
            if isinstance(unit, Segment):
                run, args = self._segment_fn(unit), [env[v] for v in unit.ext]
                kwargs = self.checkpoint_kwargs if unit.checkpoint else None
                if unit.owner is not None:
                    copies, j = unit.owner
                    outs = copies[j](run, kwargs, *args)
                elif kwargs:
                    outs = torch_checkpoint.checkpoint(run, *args, **kwargs)
                else:
                    outs = run(*args)
                env.update(zip(unit.exports, outs))
            else:
                env[unit.out] = self._run(unit, env)
            for vid in free:
                del env[vid]

    def _chunked_term(self, op, env, targets):
        hidden = self._inputs(op, env)[0]
        targets = targets.view(hidden.shape[0], -1)

        def head(piece):
            if op.frozen:
                with torch.no_grad():
                    return op.module(piece)
            return op.module(piece)
        style, chunks = self.chunked or ("torchtune", losses.TORCHTUNE_CHUNKS)
        if style == "litgpt":
            return losses.litgpt_chunked_ce(head, hidden, targets, chunks)
        return losses.torchtune_chunked_ce(head, hidden, targets, chunks)

    def _segment_fn(self, segment):
        def run(*tensors):
            env = dict(zip(segment.ext, tensors))
            for op, free in zip(segment.ops, segment.free_after):
                env[op.out] = self._run(op, env)
                for vid in free:
                    del env[vid]
            return tuple(env[v] for v in segment.exports)
        return run

    @staticmethod
    def _inputs(op, env):
        args = []
        for vid, steps in op.reads:
            t = env[vid]
            for step in steps:
                t = _apply_step(t, step)
            args.append(t)
        return args

    def _run(self, op, env):
        args = self._inputs(op, env)
        if op.frozen:
            with torch.no_grad():
                return self._compute(op, args)
        return self._compute(op, args)

    def _compute(self, op, args):
        m, kind, extra = op.module, op.kind, op.extra
        if kind in ("linear", "norm", "mlp", "moe", "conv"):
            return m(args[0])
        if kind == "embedding":
            out = m(args[0])
            return out.sum(dim=2) if out.dim() == 4 else out
        if kind == "attention":
            x = args[0]
            return m(x, args[1] if extra.get("cross") else x,
                     attention_mode(m.fused, self.setup))
        if kind == "recurrent":
            return m(args[0])[0]
        if kind == "parameters":
            w, mode = m.values, extra["mode"]
            if mode == "alone":
                return w.view(1, 1, -1).expand(1, 1, -1)
            x = args[0]
            if mode == "scale":
                return x * w
            if mode == "table":
                return x + w.view(-1, x.shape[-1])[: x.shape[1]]
            if mode == "vector":
                return x + w
            return x + w.mean()
        if kind == "ACTIVATION":
            return _activation(extra["name"])(args[0])
        if kind == "DROPOUT":
            return F.dropout(args[0], p=0.1, training=True)
        if kind == "SOFTMAX":
            return torch.softmax(args[0], dim=-1)
        if kind == "ADD":
            return args[0] + (args[1] if len(args) > 1 else args[0])
        if kind == "CONCAT":
            return self._concat(args, extra)
        return self._pool(args[0], extra["pool"])

    @staticmethod
    def _concat(args, extra):
        p, dim = extra["fit"]
        b = args[0].shape[0]
        if extra["join"] == "width":
            # Channels of a feature map (a U-Net skip) or features of tokens.
            axis = 1 if extra["layout"] == "spatial" else 2
            out = torch.cat(args, dim=axis) if len(args) > 1 else args[0]
            have = out.shape[axis]
            if have > dim:
                out = out.narrow(axis, 0, dim)
            elif have < dim:
                out = F.pad(out, [0, 0] * (out.dim() - 1 - axis) + [0, dim - have])
            return out
        if extra["join"] == "positions":
            out = torch.cat(args, dim=1) if len(args) > 1 else args[0]
        else:
            out = torch.cat([a.reshape(b, -1) for a in args], dim=1)
        out = out.reshape(b, -1)
        if out.shape[1] > p * dim:
            out = out[:, : p * dim]
        elif out.shape[1] < p * dim:
            out = F.pad(out, (0, p * dim - out.shape[1]))
        return out.reshape(b, p, dim)

    @staticmethod
    def _pool(x, pool):
        if pool[0] == "none":
            return x
        if pool[0] == "max":
            grid = pool[1]
            return {1: F.adaptive_max_pool1d, 2: F.adaptive_max_pool2d,
                    3: F.adaptive_max_pool3d}[len(grid)](x, grid)
        if pool[0] == "mean":
            if pool[1] == 1:
                return x.mean(dim=1, keepdim=True)
            return F.adaptive_avg_pool1d(x.transpose(1, 2), pool[1]).transpose(1, 2)
        _, p, dim = pool
        b = x.shape[0]
        return F.adaptive_avg_pool1d(x.reshape(b, 1, -1), p * dim).reshape(b, p, dim)


def _liveness(units, keep):
    """For each unit, the vids whose last read is that unit (to free after
    it); vids in `keep` are never freed."""
    last = {}
    for i, unit in enumerate(units):
        for vid in _unit_reads(unit):
            last[vid] = i
    free = [[] for _ in units]
    for vid, i in last.items():
        if vid not in keep:
            free[i].append(vid)
    return free


def _unit_reads(unit):
    if isinstance(unit, Segment):
        return unit.ext
    reads = [vid for vid, _ in unit.reads]
    if "targets" in unit.extra:
        reads.append(unit.extra["targets"])
    return reads


def _finish_segments(units, final, loss_reads=()):
    """Fills each segment's external reads, exports and free lists;
    `loss_reads` are read after the units (by a chunked loss's head)."""
    later_reads = {v.vid for v in final} | set(loss_reads)
    for unit in reversed(units):
        if isinstance(unit, Segment):
            made = {op.out for op in unit.ops}
            reads = []
            for op in unit.ops:
                for vid in _unit_reads(op):
                    if vid not in made and vid not in reads:
                        reads.append(vid)
            unit.ext = reads
            unit.exports = [op.out for op in unit.ops if op.out in later_reads]
            unit.free_after = _liveness(unit.ops, set(unit.exports) | set(unit.ext))
        later_reads.update(_unit_reads(unit))
