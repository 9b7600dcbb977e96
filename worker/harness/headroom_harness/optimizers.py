"""The setup's optimizer: torch's, bitsandbytes', transformers' or the
harness's own plain-PyTorch Lion and Adafactor, and optimizer_in_backward."""

import math

import torch

from headroom_harness.errors import SpecError
from headroom_harness.torch_support import torch_at_least


class Lion(torch.optim.Optimizer):
    """Lion (Chen et al. 2023) in plain PyTorch: one momentum in the
    parameter dtype; update = sign(beta1*m + (1-beta1)*g), then
    m = beta2*m + (1-beta2)*g; decoupled weight decay. One tensor at a time."""

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                m = state["exp_avg"]
                if group["weight_decay"]:
                    p.mul_(1 - group["lr"] * group["weight_decay"])
                update = m.mul(beta1).add_(p.grad, alpha=1 - beta1).sign_()
                p.add_(update, alpha=-group["lr"])
                m.mul_(beta2).add_(p.grad, alpha=1 - beta2)
        return None


class HarnessAdafactor(torch.optim.Optimizer):
    """transformers' Adafactor algorithm with its defaults (scale_parameter,
    relative_step, beta1 None, eps (1e-30, 1e-3), clip_threshold 1.0,
    decay_rate -0.8), used when transformers does not import: a factored
    fp32 second moment (row and column means) for tensors of two or more
    dimensions, a full one for vectors, no first moment; one tensor at a
    time, in fp32 for a 16-bit parameter."""

    def __init__(self, params, eps=(1e-30, 1e-3), clip_threshold=1.0, decay_rate=-0.8):
        super().__init__(params, dict(eps=eps, clip_threshold=clip_threshold,
                                      decay_rate=decay_rate))

    @staticmethod
    def _rms(t):
        return t.norm(2) / (t.numel() ** 0.5)

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            eps1, eps2 = group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad.float()
                state = self.state[p]
                factored = grad.dim() >= 2
                if not state:
                    state["step"] = 0
                    if factored:
                        state["exp_avg_sq_row"] = torch.zeros(grad.shape[:-1], device=p.device)
                        state["exp_avg_sq_col"] = torch.zeros(grad.shape[:-2] + grad.shape[-1:],
                                                              device=p.device)
                    else:
                        state["exp_avg_sq"] = torch.zeros_like(grad)
                    state["RMS"] = 0
                state["step"] += 1
                p32 = p.float() if p.dtype != torch.float32 else p
                state["RMS"] = float(self._rms(p32))
                lr = min(1e-2, 1.0 / math.sqrt(state["step"])) * max(eps2, state["RMS"])
                beta2t = 1.0 - math.pow(state["step"], group["decay_rate"])
                update = grad ** 2 + eps1
                if factored:
                    row, col = state["exp_avg_sq_row"], state["exp_avg_sq_col"]
                    row.mul_(beta2t).add_(update.mean(dim=-1), alpha=1.0 - beta2t)
                    col.mul_(beta2t).add_(update.mean(dim=-2), alpha=1.0 - beta2t)
                    r = (row / row.mean(dim=-1, keepdim=True)).rsqrt_().unsqueeze(-1)
                    c = col.unsqueeze(-2).rsqrt()
                    update = torch.mul(r, c).mul_(grad)
                else:
                    sq = state["exp_avg_sq"]
                    sq.mul_(beta2t).add_(update, alpha=1.0 - beta2t)
                    update = sq.rsqrt().mul_(grad)
                update.div_((self._rms(update) / group["clip_threshold"]).clamp_(min=1.0))
                update.mul_(lr)
                p32.add_(-update)
                if p32 is not p:
                    p.copy_(p32)
        return None


def optimizer_impl(setup, device):
    """What implements the setup's optimizer here (said in every result),
    or SpecError when nothing can (a failure record). offload
    OPTIMIZER_GRADIENTS wraps it in torchao's CPUOffloadOptimizer."""
    impl = _optimizer_impl(setup, device)
    if setup.offload != "OPTIMIZER_GRADIENTS":
        return impl
    if setup.optimizer_in_backward:
        raise SpecError("setup.offload = OPTIMIZER_GRADIENTS steps on the host after "
                        "backward: not allowed with optimizer_in_backward")
    try:
        from torchao.optim import CPUOffloadOptimizer  # noqa: F401
    except ImportError as error:
        raise SpecError("setup.offload = OPTIMIZER_GRADIENTS needs torchao "
                        "(torchao.optim.CPUOffloadOptimizer(offload_gradients=True)), which "
                        f"does not import here ({error})") from None
    return f"torchao.optim.CPUOffloadOptimizer({impl}, offload_gradients=True)"


def _optimizer_impl(setup, device):
    name = setup.optimizer
    if name == "ADAMW_FUSED":
        if device.type != "cuda":
            raise SpecError("setup.optimizer = ADAMW_FUSED: torch.optim.AdamW(fused=True) "
                            "runs on CUDA only")
        if not torch_at_least(2, 0):
            raise SpecError("setup.optimizer = ADAMW_FUSED needs torch >= 2.0 "
                            f"(AdamW fused=True), found {torch.__version__}")
        return "torch.optim.AdamW(fused=True)"
    if name in ("ADAM8BIT", "PAGED_ADAMW8BIT"):
        try:
            import bitsandbytes  # noqa: F401
        except ImportError as error:
            raise SpecError(f"setup.optimizer = {name} needs bitsandbytes, which does not "
                            f"import here ({error})") from None
        return ("bitsandbytes.optim.Adam8bit" if name == "ADAM8BIT"
                else "bitsandbytes.optim.PagedAdamW8bit")
    if name == "PAGED_ADAMW":
        try:
            import bitsandbytes  # noqa: F401
        except ImportError as error:
            raise SpecError("setup.optimizer = PAGED_ADAMW needs bitsandbytes (PagedAdamW, "
                            f"optim_bits 32), which does not import here ({error}); the "
                            "harness does not emulate paged (CUDA managed) memory") from None
        return "bitsandbytes.optim.PagedAdamW(optim_bits=32)"
    if name in ("ADAM4BIT", "ADAMFP8"):
        cls = {"ADAM4BIT": "AdamW4bit", "ADAMFP8": "AdamWFp8"}[name]
        try:
            import torchao.optim  # noqa: F401
        except ImportError as error:
            raise SpecError(f"setup.optimizer = {name} needs torchao (torchao.optim.{cls}), "
                            f"which does not import here ({error})") from None
        return f"torchao.optim.{cls}"
    if name == "ADAFACTOR":
        try:
            from transformers.optimization import Adafactor  # noqa: F401
            return "transformers.optimization.Adafactor (defaults, beta1 None)"
        except ImportError:
            return ("the harness's plain-PyTorch Adafactor (transformers does not import; "
                    "same algorithm and defaults)")
    return {"ADAMW": "torch.optim.AdamW(foreach=True)",
            "ADAMW_LOOP": "torch.optim.AdamW(foreach=False)",
            "LION": "the harness's plain-PyTorch Lion",
            "SGD": "torch.optim.SGD", "SGD_MOMENTUM": "torch.optim.SGD(momentum=0.9)"}[name]


# The torch optimizer class and arguments torchao's CPUOffloadOptimizer
# builds on the host: it takes a class and its kwargs, keeps the state and
# a copy of each parameter there and, with offload_gradients, frees each GPU
# gradient once copied (torchao/optim/cpu_offload.py @
# 36027d82d1ad9949597ea16002ff4940374b1b94). AdamW4bit and AdamWFp8:
# torchao/optim/adam.py at the same commit. PagedAdamW(optim_bits=32):
# bitsandbytes/optim/adamw.py @ 95f9af309d4d5793847169c39288dcd3fcbdf564.
_OFFLOAD_BASES = {"ADAMW": ("AdamW", {"lr": 1e-4}), "ADAMW_LOOP": ("AdamW", {"lr": 1e-4}),
                  "SGD": ("SGD", {"lr": 1e-3}),
                  "SGD_MOMENTUM": ("SGD", {"lr": 1e-3, "momentum": 0.9})}


def make_optimizer(name, params, offload="OFFLOAD_UNSPECIFIED"):
    """The setup's optimizer over params (optimizer_impl checked first);
    offload OPTIMIZER_GRADIENTS: torchao's CPUOffloadOptimizer around it,
    gradients offloaded too."""
    if offload == "OPTIMIZER_GRADIENTS":
        from torchao.optim import CPUOffloadOptimizer
        if name not in _OFFLOAD_BASES:
            raise SpecError(f"setup.offload = OPTIMIZER_GRADIENTS with optimizer {name}: "
                            "allowed ADAMW, ADAMW_LOOP, SGD or SGD_MOMENTUM (a torch "
                            "optimizer the host can step)")
        cls, kwargs = _OFFLOAD_BASES[name]
        return CPUOffloadOptimizer(params, getattr(torch.optim, cls), offload_gradients=True,
                                   **kwargs)
    if name == "PAGED_ADAMW":
        import bitsandbytes as bnb
        return bnb.optim.PagedAdamW(params, lr=1e-4, optim_bits=32)
    if name == "ADAM4BIT":
        from torchao.optim import AdamW4bit
        return AdamW4bit(params, lr=1e-4)
    if name == "ADAMFP8":
        from torchao.optim import AdamWFp8
        return AdamWFp8(params, lr=1e-4)
    if name == "SGD":
        return torch.optim.SGD(params, lr=1e-3)
    if name == "SGD_MOMENTUM":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    if name == "ADAMW_FUSED":
        return torch.optim.AdamW(params, lr=1e-4, fused=True)
    if name == "ADAMW_LOOP":
        return torch.optim.AdamW(params, lr=1e-4, foreach=False)
    if name == "ADAM8BIT":
        import bitsandbytes as bnb
        return bnb.optim.Adam8bit(params, lr=1e-4)
    if name == "PAGED_ADAMW8BIT":
        import bitsandbytes as bnb
        return bnb.optim.PagedAdamW8bit(params, lr=1e-4)
    if name == "ADAFACTOR":
        try:
            from transformers.optimization import Adafactor
        except ImportError:
            return HarnessAdafactor(params)
        return Adafactor(params, lr=None, scale_parameter=True, relative_step=True,
                         warmup_init=False, beta1=None)
    if name == "LION":
        return Lion(params)
    return torch.optim.AdamW(params, lr=1e-4, foreach=True)


class InBackward:
    """optimizer_in_backward: one optimizer per parameter, stepped (and its
    gradient freed) by a post-accumulate-grad hook during backward."""

    def __init__(self, name, params):
        if not hasattr(torch.Tensor, "register_post_accumulate_grad_hook"):
            raise SpecError("setup.optimizer_in_backward needs torch >= 2.1 "
                            "(register_post_accumulate_grad_hook), found "
                            f"{torch.__version__}")
        self.optimizers = {p: make_optimizer(name, [p]) for p in params}

        def hook(p):
            self.optimizers[p].step()
            self.optimizers[p].zero_grad(set_to_none=True)
        self.handles = [p.register_post_accumulate_grad_hook(hook) for p in params]

    def step(self):
        pass

    def zero_grad(self, set_to_none=True):
        pass
