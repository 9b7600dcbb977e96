#ifndef HEADROOM_CLIENT_FIT_ADVICE_H_
#define HEADROOM_CLIENT_FIT_ADVICE_H_

// What to try after a `headroom fit` answer that is not FITS everywhere:
// the next steps computed from the request and the answer, never canned.

#include <ostream>
#include <string>
#include <vector>

#include "headroom/v1/planner.pb.h"

namespace headroom::cli {

// One line per step that applies when some verdict of `response` is
// DOES_NOT_FIT or BORDERLINE (none when every verdict is FITS):
//  - `--gpus auto` when the request asked for one GPU (setup.gpus 0 or 1)
//    and not already for the smallest count;
//  - `--checkpointing` when activation checkpointing is off;
//  - LoRA / QLoRA (`--lora_rank`, `--quant_base nf4`) for full fine-tuning
//    (no adapters, no quantized base, nothing frozen);
//  - a larger card: the smallest GPU catalog card (core/catalog/
//    gpu_catalog.h) whose memory holds the largest not-FITS batch's device
//    upper bound x headroom, the comparison the verdict makes;
//  - per card, for a not-FITS batch above 1 when some smaller batch FITS:
//    `--grad_accum A` (the smallest A dividing the batch whose microbatch
//    is at most the card's largest FITS batch) or `--batch` that largest.
std::vector<std::string> NextSteps(const v1::CheckFitRequest& request,
                                   const v1::CheckFitResponse& response);

// "\nnext steps (...):\n  - ...\n" when NextSteps has any, else nothing.
void PrintNextSteps(const v1::CheckFitRequest& request,
                    const v1::CheckFitResponse& response, std::ostream& out);

}  // namespace headroom::cli

#endif  // HEADROOM_CLIENT_FIT_ADVICE_H_
