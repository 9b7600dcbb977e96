"""What this torch can do: the version checks and the few calls whose form
differs between torch 1.13 (Debian 12) and torch 2.x (the worker image)."""

import re

import torch
import torch.nn.functional as F

# torch < 2.0 has no fused attention kernel: fused layers then run the eager
# path, and the hello line says "sdpa": false.
HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


def is_oom(error):
    """Whether an exception is CUDA running out of memory (a result, not a failure)."""
    oom_type = getattr(torch.cuda, "OutOfMemoryError", None)
    if oom_type is not None and isinstance(error, oom_type):
        return True
    return isinstance(error, RuntimeError) and "out of memory" in str(error).lower()


def autocast_enabled(device_type):
    """Whether autocast is on for the device type."""
    # torch < 2.4 has only the per-device functions; it switches CPU autocast
    # off (with a warning) for a dtype it does not support.
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:
        return (torch.is_autocast_cpu_enabled() if device_type == "cpu"
                else torch.is_autocast_enabled())


def torch_at_least(major, minor):
    """Whether this torch's version is at least major.minor."""
    parts = re.findall(r"[0-9]+", torch.__version__)[:2]
    return (int(parts[0]), int(parts[1])) >= (major, minor)


def grad_scaler():
    """fp16 training's loss scaler on CUDA (torch.amp's where this torch has it)."""
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler("cuda")
    return torch.cuda.amp.GradScaler()


def compile_unavailable():
    """Why torch.compile cannot run here, or None when it can."""
    major = int(torch.__version__.split(".")[0])
    if major < 2 or not hasattr(torch, "compile"):
        return f"torch.compile needs torch >= 2.0, found {torch.__version__}"
    return None

