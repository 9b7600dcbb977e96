"""What a step keeps for backward beyond the plain forward: torchtune's
activation offloading (saved tensors moved to host memory in forward,
brought back in backward) and selective activation checkpointing (every
Nth block, or op-level)."""

import torch
import torch.nn as nn

from headroom_harness.errors import SpecError

# torchtune's OffloadActivations(min_offload_size=1024): smaller tensors stay.
MIN_OFFLOAD_BYTES = 1024


class OffloadActivations(torch.autograd.graph.saved_tensors_hooks):
    """torchtune's OffloadActivations without its streams
    (use_streams=False): in forward every saved tensor of at least 1024
    bytes on the model's device that is not a parameter is copied into a
    new host tensor (pinned when the device is CUDA) and the device copy is
    dropped; backward copies it back (torchtune/training/
    _activation_offloading.py pack_tensor / unpack_tensor_single_stream @
    bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1). On a CPU run the "host" copy
    is a second CPU tensor, so the hooks run as they would on a GPU.
    offloaded_bytes counts what went out."""

    def __init__(self, device):
        self.offloaded_bytes = 0
        pin = device.type == "cuda"

        def pack(tensor):
            size = tensor.element_size() * tensor.nelement()
            if (tensor.device != device or size < MIN_OFFLOAD_BYTES
                    or isinstance(tensor, nn.Parameter)):
                return (False, tensor)
            host = torch.empty(tensor.size(), dtype=tensor.dtype, layout=tensor.layout,
                               pin_memory=pin, device="cpu")
            host.copy_(tensor, non_blocking=pin)
            self.offloaded_bytes += size
            return (True, host)

        def unpack(packed):
            moved, tensor = packed
            if not moved:
                return tensor
            return tensor.to(device, non_blocking=True)

        super().__init__(pack, unpack)


def selective_every(segments, every):
    """torchtune's selective layer checkpointing (ac_mode "selective",
    integer ac_option): blocks counted from 1, the ones whose count is a
    multiple of `every` checkpointed, the others keep their activations
    (torchtune/training/activations.py checkpoint_wrapper @ bd2a0fc7).
    Clears `checkpoint` on the segments left out; returns how many stay."""
    kept = 0
    for count, segment in enumerate(segments, start=1):
        segment.checkpoint = count % every == 0
        kept += segment.checkpoint
    return kept


# Op-level selective checkpointing: the outputs of these ops are saved, the
# rest of a checkpointed block recomputed (the proto's SELECTIVE with
# checkpoint_every 0: matmul and attention outputs saved).
SAVED_OPS = ("mm", "addmm", "bmm", "_scaled_dot_product_flash_attention",
             "_scaled_dot_product_efficient_attention",
             "_scaled_dot_product_cudnn_attention")


def op_level_context():
    """checkpoint()'s context_fn for op-level selective checkpointing, or
    SpecError when this torch has no selective checkpoint contexts."""
    checkpoint = torch.utils.checkpoint
    make = getattr(checkpoint, "create_selective_checkpoint_contexts", None)
    policy = getattr(checkpoint, "CheckpointPolicy", None)
    if make is None or policy is None:
        raise SpecError("setup.checkpointing = SELECTIVE with checkpoint_every 0 (op-level) "
                        "needs torch.utils.checkpoint.create_selective_checkpoint_contexts "
                        f"(torch >= 2.4), found {torch.__version__}; set checkpoint_every "
                        "1 .. 4096 for every Nth block")
    saved = [getattr(torch.ops.aten, name).default for name in SAVED_OPS
             if hasattr(torch.ops.aten, name)]

    def choose(ctx, op, *args, **kwargs):
        return policy.MUST_SAVE if op in saved else policy.PREFER_RECOMPUTE

    return lambda: make(choose)
