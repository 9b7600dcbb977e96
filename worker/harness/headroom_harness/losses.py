"""The loss over the output head: the full cross-entropy (the harness's
own), torchtune's chunked one and litgpt's. A chunked loss runs the head
itself, piece by piece, so the Program hands it the head's input."""

import torch
import torch.nn.functional as F

# torchtune's CEWithChunkedOutputLoss(num_output_chunks=8) default
# (torchtune/modules/loss/ce_chunked_output_loss.py @
# bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1).
TORCHTUNE_CHUNKS = 8


def full_ce(logits, targets):
    """Cross-entropy over all logits at once, upcast to fp32 (the
    harness's loss before issue 31)."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1))


def torchtune_chunked_ce(head, hidden, targets, chunks):
    """torchtune's CEWithChunkedOutputLoss with its model's chunked output:
    output_chunks = [head(h) for h in hidden.tensor_split(chunks, dim=1)]
    (every chunk's logits in the compute dtype, alive together), then per
    chunk an fp32 upcast and cross_entropy(reduction="sum"), the total
    divided by the number of targets (torchtune/modules/loss/
    ce_chunked_output_loss.py @ bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1).
    `targets` is [B, P]."""
    logits = [head(piece) for piece in hidden.tensor_split(chunks, dim=1)]
    labels = targets.tensor_split(chunks, dim=1)
    total = 0.0
    for chunk, label in zip(logits, labels):
        total = total + F.cross_entropy(chunk.reshape(-1, chunk.shape[-1]).float(),
                                        label.reshape(-1), reduction="sum")
    return total / targets.numel()


def litgpt_chunked_ce(head, hidden, targets, chunk_positions):
    """litgpt's GPT.forward(lm_head_chunk_size) and chunked_cross_entropy:
    [lm_head(x_i) for x_i in x.split(chunk_size, dim=1)], then per chunk
    cross_entropy(reduction="none") in the logits' own dtype, concatenated,
    summed and divided by the count (litgpt/model.py, litgpt/utils.py @
    26857050fe3ff627cd714fe92f5838f51a3d5efa). `targets` is [B, P]."""
    logits = [head(piece) for piece in hidden.split(chunk_positions, dim=1)]
    labels = targets.split(logits[0].shape[1], dim=1)
    losses = [F.cross_entropy(chunk.reshape(-1, chunk.shape[-1]), label.reshape(-1),
                              reduction="none")
              for chunk, label in zip(logits, labels)]
    return torch.cat(losses).sum() / targets.numel()
