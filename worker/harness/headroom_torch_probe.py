#!/usr/bin/env python3
"""Builds a Headroom model spec in PyTorch and measures its training step.

The `torch` probe executor of headroom-worker runs this file as a subprocess.
It reads the planner's own spec (models/*.json: the proto3 JSON of
headroom.v1.ModelSpec) so that prediction and measurement describe the same
graph. Commands:

  count --spec FILE            one JSON line: name, params, trainable_params
                               (built on the meta device: nothing allocated)
  run --spec FILE --batches 1,2,4 [--setup JSON|FILE] [--warmup 1]
      [--steps 3] [--device cuda|cuda:0|cpu] [--positions N]
                               JSON lines: hello, then per batch a
                               batch_start and a result (README.md); on a
                               GPU with NVML the result's energy_j is the
                               total-energy counter over the timed steps only
  generate --hf_config FILE --quant fp16|nf4|int8 [--prompt_tokens 64]
      [--new_tokens 128] [--warmup 1] [--device cuda:0] [--idle_s 1]
                               an energy probe: idle power first, then the
                               architecture built with random weights at the
                               quantization (bitsandbytes for nf4/int8), a
                               warm-up generation, and NVML's total-energy
                               counter read around one synchronized
                               generation window; one "generation" line

Bad input gives one {"event": "error"} line naming the field and exit 2.
Needs python3 and torch (Debian 12's python3-torch 1.13 or a CUDA torch 2.x).

This file is the entry point only: the harness is the headroom_harness
package beside it (installed beside it too), headroom_harness/cli.py its
command line.
"""

import json
import os
import sys

if __name__ == "__main__":
    try:
        import torch  # noqa: F401  (said on stdout when missing, as every error)
    except ImportError as import_error:
        print(json.dumps({"event": "error",
                          "error": f"python3-torch is not installed: {import_error}"}),
              flush=True)
        sys.exit(2)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from headroom_harness.cli import main
    sys.exit(main())
