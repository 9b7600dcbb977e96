#!/bin/bash
# The smallest GPU count per strategy for Llama-3-8B (tests/data/hf) and Llama-3.1-70B
# (models/hf), the published configs, full fine-tune and LoRA, on H100,
# A100-40GB and L4, as `headroom fit --gpus auto` answers against a running
# planner: bench/multigpu/min_gpus.sh [HOST:PORT] > bench/multigpu/min_gpus.txt
set -euo pipefail
server=${1:-127.0.0.1:50051}
root=$(cd "$(dirname "$0")/../.." && pwd)
cli=${HEADROOM:-$root/build/client/headroom}
cd "$root"
for model in tests/data/hf/meta-llama-3-8b.json llama-3.1-70b; do
  # Full fine-tune in bf16 mixed precision (fp32 master weights, AdamW);
  # LoRA as it is usually run, on bf16 weights (bf16-true), rank 16 on
  # every linear.
  for setup in "--precision bf16" \
    "--precision bf16-true --lora_rank 16 --lora_targets all-linear"; do
    for ckpt in "" "--checkpointing"; do
      # shellcheck disable=SC2086
      echo "### headroom fit --model $model --batch 1 --positions 2048 $setup $ckpt --gpus auto --gpu H100,A100-40GB,L4"
      # shellcheck disable=SC2086
      timeout 60 "$cli" --server "$server" fit --model "$model" --batch 1 \
        --positions 2048 $setup $ckpt --gpus auto \
        --gpu H100,A100-40GB,L4 | sed -n '/smallest GPU count/,$p'
      echo
    done
  done
done
