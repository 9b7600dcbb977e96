"""The data flow of a spec: which tensor each layer copy reads, decided once
from per-sample shapes, before anything runs (no torch needed here)."""

import dataclasses
import itertools
import math

from headroom_harness.errors import SpecError

# A spec is a list of layers, not a wired graph: towers, skips and residual
# adds are implied by shapes (worker/harness/README.md, "How layers are
# wired"; core/memory/memory_profile.cc reads it the same way, layer by
# layer). Wiring below connects it with fixed rules, from
# per-sample shapes only, before anything runs:
#  - a layer reads the newest unread output whose shape is exactly what it
#    needs (an output that carries gradient first, so a trainable layer does
#    not read a frozen target network's output); else a model input of that
#    shape; else the newest output with as many values (a reshape: flatten,
#    patch merging); else the newest output adapted (see _plan_adapter);
#  - ADD adds the newest output to the residual of its block: the last ADD
#    output in the block, else the first input the block read of that shape;
#  - CONCAT joins the newest unread outputs, then the block's earlier inputs
#    of the same positions (U-Net skips), until it has dim values per position;
#  - cross attention (kv_positions or kv_input_dim set) reads its keys and
#    values from another output (an encoder's), which stays readable;
#  - every output nobody reads ends in the loss, so every parameter gets a
#    gradient and the optimizer keeps state for all of them.
# Tensors are freed after their last read, as Python frees a model's locals.


@dataclasses.dataclass(frozen=True)
class Shape:
    """Per-sample shape: "tokens" is [B, positions, width]; "spatial" is
    channels-first [B, width, *grid]. A tokens shape keeps the grid it came
    from (or None) so a later convolution can restore it."""
    layout: str
    positions: int
    width: int
    grid: tuple = None

    @property
    def numel(self):
        return self.positions * self.width


@dataclasses.dataclass
class Value:
    vid: int
    shape: Shape
    grad: bool            # carries gradient (not an input, not a frozen output)
    is_input: bool = False
    logits: bool = False
    make: tuple = None    # for inputs: ("float",) | ("ids", num) | ("targets", num)
    targets: int = None   # for logits: the vid of their class targets


@dataclasses.dataclass
class Op:
    kind: str             # layer kind, or elementwise op name
    name: str             # the spec path, for errors
    module: object        # the layer copy's torch module
    reads: list           # [(vid, adapter steps)]
    out: int
    frozen: bool
    extra: dict


@dataclasses.dataclass
class Segment:
    """Ops run as one unit: under one activation checkpoint (a block copy, or
    one copy of a repeated layer), and/or as one FSDP wrapped unit (one copy
    of a top-level repeated layer, run through its program.Unit module)."""
    ops: list
    ext: list = None      # vids read from outside, in order
    exports: list = None  # vids produced inside and needed later
    free_after: list = None
    checkpoint: bool = True
    # FSDP: (the layer's ModuleList of copies, copy index); the module there
    # (FSDP(Unit) once wrapped) runs the segment, so its forward gathers the
    # unit's parameters.
    owner: tuple = None


def prod(xs):
    """The product of a grid's sizes; 1 for an empty or missing grid."""
    return math.prod(xs) if xs else 1


def _factorizations(n, dims, limit=20000):
    """Ordered ways to write n as `dims` factors, squarest first."""
    def rec(m, k):
        if k == 1:
            yield (m,)
            return
        for a in _divisors(m):
            for rest in rec(m // a, k - 1):
                yield (a,) + rest
    out = list(itertools.islice(rec(n, dims), limit))
    return sorted(out, key=lambda g: (max(g) / min(g), g))


def _divisors(m):
    small = [d for d in range(1, math.isqrt(m) + 1) if m % d == 0]
    return small + [m // d for d in reversed(small) if d * d != m]


# (stride, padding, output_padding) per dim from the kernel size, the usual
# choices first; the first that turns the input grid into the layer's
# positions wins.
CONV_RULES = (
    lambda k: (1, (k - 1) // 2, 0),   # "same"
    lambda k: (1, 0, 0),              # "valid"
    lambda k: (k, 0, 0),              # patchify: stride = kernel
    lambda k: (2, (k - 1) // 2, 0),   # stride-2 downsample
    lambda k: (2, k // 2, 0),
    lambda k: (1, k // 2, 0),         # even kernel, padding k/2 (EEGNet)
)
TRANSPOSED_RULES = (
    lambda k: (k, 0, 0),              # unpatchify: stride = kernel
    lambda k: (2, max(k - 2, 0) // 2, 0),
    lambda k: (2, (k - 1) // 2, 1),
    lambda k: (1, (k - 1) // 2, 0),
)


def _conv_out(size, k, rule, transposed):
    stride, pad, out_pad = rule(k)
    if transposed:
        return (size - 1) * stride - 2 * pad + k + out_pad
    return (size + 2 * pad - k) // stride + 1 if size + 2 * pad >= k else 0


class _Scope:
    """A block copy (or the whole model): what ADD and CONCAT look back at."""

    def __init__(self):
        self.entries = []   # values its ops read, in order
        self.adds = []      # its ADD outputs


class Wiring:
    """Decides, from shapes, which tensor every layer copy reads; yields the
    program's ops (with checkpoint segments) and the values the loss reads."""

    def __init__(self, spec, setup):
        self.spec = spec
        self.setup = setup
        self.values = []
        self.live = []       # outputs not read yet, oldest first
        self.contexts = []   # outputs read as cross-attention memory
        self.inputs = []     # model inputs (kept by the training loop anyway)
        self.scopes = [_Scope()]
        self.default_positions = setup.positions or spec.positions
        # The planner scales an attention's kv_positions with the setup's
        # positions when the layer inherits its positions (memory_profile.cc).
        self.position_scale = (setup.positions / spec.positions
                               if setup.positions and spec.positions else 1.0)

    # ---- values ----
    def _new(self, shape, grad, **kw):
        value = Value(len(self.values), shape, grad, **kw)
        self.values.append(value)
        return value

    def _output(self, shape, grad, **kw):
        value = self._new(shape, grad, **kw)
        self.live.append(value)
        return value

    def _input(self, shape, make):
        value = self._new(shape, False, is_input=True, make=make)
        self.inputs.append(value)
        return value

    def _consume(self, value, as_context=False):
        if value in self.live:
            self.live.remove(value)
            if as_context:
                self.contexts.append(value)
        self.scopes[-1].entries.append(value)

    def _pick(self, positions, width, trainable):
        """The value a layer reads (rules at the top of this module)."""
        pool = list(itertools.chain(reversed(self.live), reversed(self.contexts)))
        exact = [v for v in pool if (v.shape.positions, v.shape.width) == (positions, width)]
        if trainable:
            exact.sort(key=lambda v: not v.grad)  # stable: newest grad first
        if exact:
            return exact[0]
        for v in reversed(self.inputs):
            if (v.shape.positions, v.shape.width) == (positions, width) and v.make == ("float",):
                return v
        for v in pool:
            if v.shape.numel == positions * width and v in self.live:
                return v
        if self.live:
            return self.live[-1]
        if pool:
            return pool[0]
        floats = [v for v in self.inputs if v.make == ("float",)]
        return floats[-1] if floats else None

    # ---- adapters: parameter-free reshapes between what one layer makes and
    # what the next reads; each step is (name, args...) run by _apply_step.
    def _plan_adapter(self, src, positions, width, layout, grid=None):
        steps, cur = [], src.shape

        def to_tokens():
            nonlocal cur
            if cur.layout == "spatial":
                steps.append(("to_tokens",))
                cur = Shape("tokens", cur.positions, cur.width, cur.grid)

        def finish():
            nonlocal cur
            if layout == "tokens":
                to_tokens()
                return
            want = grid or (cur.grid if cur.grid and prod(cur.grid) == cur.positions
                            else (cur.positions,))
            if cur.layout == "tokens":
                steps.append(("to_spatial", want))
            elif cur.grid != want:
                steps.append(("regrid", want))
            cur = Shape("spatial", cur.positions, cur.width, want)

        if (cur.positions, cur.width) == (positions, width):
            finish()
            return steps, cur
        if cur.numel == positions * width:
            to_tokens()
            steps.append(("reshape", positions, width))
            cur = Shape("tokens", positions, width, None)
            finish()
            return steps, cur
        if (layout == "spatial" and cur.width == width and grid and cur.grid
                and len(cur.grid) == len(grid)):
            # Same channels on another grid: nearest upsampling (a U-Net
            # decoder) or average pooling.
            if cur.layout == "tokens":
                steps.append(("to_spatial", cur.grid))
            steps.append(("resize", grid))
            cur = Shape("spatial", positions, width, grid)
            return steps, cur
        if cur.layout == "spatial" and cur.positions == positions and layout == "spatial":
            # A feature map with more or fewer channels than the layer takes.
            if cur.width > width:
                steps.append(("take_channels", width))
            else:
                steps.append(("pad_channels", width - cur.width))
            cur = Shape("spatial", positions, width, cur.grid)
            finish()
            return steps, cur
        to_tokens()
        if positions == 1 and cur.positions != 1:
            # A per-sample vector: flatten (a CLS token when width fits).
            steps.append(("flatten",))
            cur = Shape("tokens", 1, cur.numel, None)
        elif cur.positions > positions:
            steps.append(("take_positions", positions))
        elif cur.positions < positions and positions % cur.positions == 0:
            steps.append(("repeat_positions", positions // cur.positions))
        elif cur.positions < positions:
            steps.append(("pad_positions", positions - cur.positions))
        keep_grid = cur.grid if cur.positions == positions else None
        if cur.width > width:
            steps.append(("take_width", width))
        elif cur.width < width:
            steps.append(("pad_width", width - cur.width))
        cur = Shape("tokens", positions, width, keep_grid)
        finish()
        return steps, cur

    def _read(self, positions, width, layout, trainable, grid=None):
        """Picks the value a layer reads and plans its adapter: returns the
        read (vid, steps) and the shape the layer sees."""
        src = self._pick(positions, width, trainable)
        if layout == "any":  # keep the source's layout when shapes agree
            same = src is not None and (src.shape.positions, src.shape.width) == (positions, width)
            layout = src.shape.layout if same else "tokens"
            grid = src.shape.grid if same else None
        if src is None:  # the model's first layer: a synthetic input
            shape = Shape(layout, positions, width, grid if layout == "spatial" else None)
            if layout == "spatial" and grid is None:
                shape = Shape("spatial", positions, width, (positions,))
            src = self._input(shape, ("float",))
        self._consume(src)
        steps, shape = self._plan_adapter(src, positions, width, layout, grid)
        return (src.vid, steps), shape

    # ---- layers ----
    def plan(self, modules, checkpointing, fsdp_units=False):
        ops = []
        self._layers(self.spec.layers, modules, self.default_positions, False,
                     checkpointing, ops, fsdp_units)
        final = list(self.live)
        return ops, final

    def _layers(self, layers, modules, positions, frozen, checkpointing, ops,
                fsdp_units=False):
        for layer, copies in zip(layers, modules):
            p = layer.positions or positions
            is_frozen = frozen or layer.frozen
            repeat = layer.repeat or 1
            # Checkpoint each block copy and each copy of a repeated layer
            # (what the planner's checkpointing assumes), outermost only.
            ckpt = checkpointing and not is_frozen and (layer.kind == "block" or repeat > 1)
            # FSDP wraps each copy of a top-level repeated layer (the
            # planner's SplitParams: those are the units, the rest is root).
            unit = fsdp_units and repeat > 1
            for j, module in enumerate(copies):
                target = []
                if layer.kind == "block":
                    self._block(layer, module, p, is_frozen, checkpointing and not ckpt,
                                target)
                else:
                    self._layer(layer, module, p, is_frozen, target)
                if ckpt or unit:
                    ops.append(Segment(target, checkpoint=ckpt,
                                       owner=(copies, j) if unit else None))
                else:
                    ops.extend(target)

    def _block(self, layer, module, p, frozen, checkpointing, ops):
        first_new = len(self.values)
        self.scopes.append(_Scope())
        self._layers(layer.children, module, p, frozen, checkpointing, ops)
        scope = self.scopes.pop()
        # What a block copy read from before it, other than the stream it
        # replaces (a DiT block's class embedding), the next copy reads too.
        out = self.live[-1].shape if self.live else None
        for v in scope.entries:
            if (v.vid < first_new and not v.is_input and v not in self.contexts
                    and (out is None or (v.shape.positions, v.shape.width)
                         != (out.positions, out.width))):
                self.contexts.append(v)

    def _layer(self, layer, module, p, frozen, ops):
        f, trainable = layer.f, not frozen
        extra = {}
        if layer.kind == "embedding":
            lookups = f["lookups"] or 1
            ids = self._input(Shape("tokens", p, lookups, None), ("ids", f["num_embeddings"]))
            reads = [(ids.vid, [])]
            out = Shape("tokens", p, f["dim"], None)
        elif layer.kind == "linear":
            read, shape = self._read(p, f["in_features"], "tokens", trainable)
            reads = [read]
            out = Shape("tokens", p, f["out_features"], shape.grid)
        elif layer.kind == "norm":
            layout = "tokens" if f["kind"] in ("LAYER", "RMS") else "spatial"
            read, shape = self._read(p, f["dim"], layout, trainable)
            reads, out = [read], shape
        elif layer.kind == "attention":
            reads, out = self._attention(layer, p, trainable, extra)
        elif layer.kind in ("mlp", "moe"):
            read, shape = self._read(p, f["hidden"], "tokens", trainable)
            reads, out = [read], shape
        elif layer.kind == "conv":
            reads, out = self._conv(layer, module, p, trainable)
        elif layer.kind == "recurrent":
            read, shape = self._read(p, f["input_size"], "tokens", trainable)
            dirs = 2 if f["bidirectional"] else 1
            reads, out = [read], Shape("tokens", p, dirs * f["hidden"], shape.grid)
        elif layer.kind == "parameters":
            reads, out = self._parameters(layer, extra)
        else:
            reads, out = self._elementwise(layer, p, trainable, extra)
        # An output carries gradient when its layer trains and has
        # parameters or reads something that carries gradient.
        grad = not frozen and (any(q.requires_grad for q in module.parameters())
                               or any(self.values[vid].grad for vid, _ in reads))
        value = self._output(out, grad, logits=layer.kind == "linear" and f["logits"])
        if value.logits:
            value.targets = self._input(Shape("tokens", p, 1, None),
                                        ("targets", f["out_features"])).vid
            extra["targets"] = value.targets
        kind = f["op"] if layer.kind == "elementwise" else layer.kind
        ops.append(Op(kind, layer.path, module, reads, value.vid, frozen, extra))
        if kind == "ADD":
            self.scopes[-1].adds.append(value)

    def _attention(self, layer, p, trainable, extra):
        f = layer.f
        read, shape = self._read(p, f["hidden"], "tokens", trainable)
        if not (f["kv_positions"] or f["kv_input_dim"]):
            return [read], Shape("tokens", p, f["hidden"], shape.grid)
        kv_p = f["kv_positions"] or p
        if f["kv_positions"] and not layer.positions:
            kv_p = max(1, round(f["kv_positions"] * self.position_scale))
        kv_in = f["kv_input_dim"] or f["hidden"]
        exact = [v for v in itertools.chain(reversed(self.live), reversed(self.contexts),
                                            reversed(self.inputs))
                 if (v.shape.positions, v.shape.width) == (kv_p, kv_in)
                 and v.vid != read[0] and v.make in (None, ("float",))]
        if exact:
            # Cross attention: keys and values from another output (an
            # encoder's), which stays readable for later layers.
            src = exact[0]
            self._consume(src, as_context=True)
            steps, _ = self._plan_adapter(src, kv_p, kv_in, "tokens")
            kv_read = (src.vid, steps)
        else:
            src = self.values[read[0]]
            steps, _ = self._plan_adapter(src, kv_p, kv_in, "tokens")
            kv_read = (src.vid, steps)
        extra["cross"] = True
        return [read, kv_read], Shape("tokens", p, f["hidden"], shape.grid)

    def _conv(self, layer, module, p, trainable):
        f = layer.f
        dims = f["dims"] or 2
        kernel = module.kernel_size
        in_p = f["in_positions"] or p
        src = self._pick(in_p, f["in_channels"], trainable)
        # The input grid: the source's own (or it scaled evenly, as a
        # decoder upsamples), else the squarest factorization that works.
        grids = []
        if src is not None and src.shape.grid and len(src.shape.grid) == dims:
            scaled = _scaled_grid(src.shape.grid, in_p)
            if scaled:
                grids.append(scaled)
        grids += [g for g in _factorizations(in_p, dims) if g not in grids]
        rules = TRANSPOSED_RULES if f["transposed"] else CONV_RULES
        for grid in grids:
            for rule in rules:
                out = tuple(_conv_out(s, k, rule, f["transposed"]) for s, k in zip(grid, kernel))
                if min(out) >= 1 and prod(out) == p:
                    geometry = [rule(k) for k in kernel]
                    module.stride = tuple(g[0] for g in geometry)
                    module.padding = tuple(g[1] for g in geometry)
                    if f["transposed"]:
                        module.output_padding = tuple(g[2] for g in geometry)
                    read, _ = self._read(in_p, f["in_channels"], "spatial", trainable, grid=grid)
                    return [read], Shape("spatial", p, f["out_channels"], out)
        raise SpecError(
            f"{layer.path}.conv: no usual stride and padding take in_positions = {in_p} "
            f"to positions = {p} with kernel {list(kernel)} in {dims} dims")

    def _parameters(self, layer, extra):
        # The spec gives a count, not a shape: the values join the newest
        # output the way such tensors do (a position table added per
        # position, a per-channel vector added everywhere, a single slope
        # scaling), so they train like the model's own.
        if not self.live:
            extra["mode"] = "alone"
            return [], Shape("tokens", 1, layer.f["count"], None)
        src = self.live[-1]
        self._consume(src)
        steps, shape = self._plan_adapter(src, src.shape.positions, src.shape.width, "tokens")
        count, width = layer.f["count"], shape.width
        if count == 1:
            extra["mode"] = "scale"
        elif count % width == 0 and count // width >= shape.positions:
            extra["mode"] = "table"
        elif count == width:
            extra["mode"] = "vector"
        else:
            extra["mode"] = "mean"
        return [(src.vid, steps)], shape

    def _elementwise(self, layer, p, trainable, extra):
        op, dim = layer.f["op"], layer.f["dim"]
        extra["name"] = layer.name
        if op in ("ACTIVATION", "DROPOUT"):
            read, shape = self._read(p, dim, "any", trainable)
            return [read], shape
        if op == "SOFTMAX":
            read, shape = self._read(p, dim, "tokens", trainable)
            return [read], shape
        if op == "ADD":
            return self._add(p, dim, trainable)
        if op == "CONCAT":
            return self._concat(p, dim, extra)
        return self._pool(p, dim, trainable, extra)

    def _add(self, p, dim, trainable):
        read, shape = self._read(p, dim, "any", trainable)
        a = read[0]
        same = lambda v: (v.shape.positions, v.shape.width) == (p, dim) and v.vid != a
        scope = self.scopes[-1]
        partner = (next((v for v in reversed(scope.adds) if same(v)), None)
                   or next((v for v in scope.entries
                            if same(v) and v.make in (None, ("float",))), None)
                   or next((v for v in reversed(self.live) if same(v)), None)
                   or next((v for v in reversed(self.inputs)
                            if same(v) and v.make == ("float",)), None))
        if partner is None:
            return [read], shape  # nothing to add: the sum of the value with itself
        if partner in self.live:
            self.live.remove(partner)
        steps, _ = self._plan_adapter(partner, p, dim, shape.layout, shape.grid)
        return [read, (partner.vid, steps)], shape

    def _concat(self, p, dim, extra):
        need, parts, total = p * dim, [], 0
        for v in reversed(list(self.live)):
            if total >= need:
                break
            parts.append(v)
            total += v.shape.numel
        if total < need:
            # Skip connections: the block's earlier inputs at these positions.
            for v in reversed(self.scopes[-1].entries):
                if total >= need:
                    break
                if (v.shape.positions == p and v not in parts
                        and v.make in (None, ("float",))):
                    parts.append(v)
                    total += v.shape.numel
        if not parts:
            floats = [v for v in self.inputs if v.make == ("float",)]
            parts = floats[-1:]
        parts.reverse()  # oldest first, as torch.cat([a, b]) is written
        for v in parts:
            self._consume(v)
        if parts and all(v.shape.positions == p for v in parts):
            spatial = all(v.shape.layout == "spatial" and v.shape.grid == parts[0].shape.grid
                          for v in parts)
            layout = "spatial" if spatial else "tokens"
            reads = [(v.vid, self._plan_adapter(v, p, v.shape.width, layout,
                                                parts[0].shape.grid if spatial else None)[0])
                     for v in parts]
            extra["join"] = "width"
            extra["layout"] = layout
            grid = parts[0].shape.grid
        elif parts and all(v.shape.width == dim for v in parts):
            reads = [(v.vid, self._plan_adapter(v, v.shape.positions, dim, "tokens")[0])
                     for v in parts]
            extra["join"] = "positions"
            layout, grid = "tokens", None
        else:
            reads = [(v.vid, self._plan_adapter(v, 1, v.shape.numel, "tokens")[0])
                     for v in parts]
            extra["join"] = "flat"
            layout, grid = "tokens", None
        extra["fit"] = (p, dim)
        return reads, Shape(layout, p, dim, grid if layout == "spatial" else None)

    def _pool(self, p, dim, trainable, extra):
        src = next((v for v in reversed(self.live) if v.shape.width == dim), None)
        src = src or self._pick(p, dim, trainable)
        if src is None or src.shape.numel <= p * dim:
            read, shape = self._read(p, dim, "tokens", trainable)
            extra["pool"] = ("none",)
            return [read], shape
        self._consume(src)
        s = src.shape
        if s.width != dim or s.positions <= p:
            # Mismatched width (a dot-product score): pool the flattened
            # values down to p x dim.
            steps, _ = self._plan_adapter(src, 1, s.numel, "tokens")
            extra["pool"] = ("flat", p, dim)
            return [(src.vid, steps)], Shape("tokens", p, dim, None)
        if s.layout == "spatial" and s.grid:
            grid = _pool_grid(s.grid, p)
            if grid:
                # Spatial pooling in a conv net: max pooling, the CNN default.
                extra["pool"] = ("max", grid)
                return [(src.vid, [])], Shape("spatial", p, dim, grid)
        steps, _ = self._plan_adapter(src, s.positions, dim, "tokens")
        # Pooling tokens (a ViT head, a mean over a history): the mean.
        extra["pool"] = ("mean", p)
        return [(src.vid, steps)], Shape("tokens", p, dim, None)


def _scaled_grid(grid, positions):
    """`grid` with every dim > 1 multiplied (or divided) by one integer so
    that it holds `positions`, or None."""
    if prod(grid) == positions:
        return tuple(grid)
    big = [s for s in grid if s > 1]
    if not big:
        return None
    ratio = (positions / prod(grid)) ** (1 / len(big))
    for r in (ratio, 1 / ratio):
        k = round(r)
        if k >= 2 and abs(r - k) < 1e-6:
            out = tuple((s * k if r is ratio else s // k) if s > 1 else 1 for s in grid)
            if prod(out) == positions:
                return out
    return None


def _pool_grid(grid, positions):
    """The grid of an even pooling of `grid` down to `positions`, or None."""
    big = [s for s in grid if s > 1]
    if not big:
        return None
    k0 = round((prod(grid) / positions) ** (1 / len(big)))
    for k in (k0, k0 - 1, k0 + 1):
        if k >= 1:
            out = tuple(s // k if s > 1 else 1 for s in grid)
            if prod(out) == positions and min(out) >= 1:
                return out
    return None
