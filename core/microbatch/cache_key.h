#ifndef HEADROOM_CORE_MICROBATCH_CACHE_KEY_H_
#define HEADROOM_CORE_MICROBATCH_CACHE_KEY_H_

// The autotune cache's key: two keys are the same entry only when every
// field (GPU, versions, packages, settings, source hash) is equal. The
// bytes are the key's deterministic serialization (map entries sorted); the
// id is a short hash of them for people and URLs.

#include <string>

#include "headroom/v1/fleet.pb.h"
#include "headroom/v1/microbatch.pb.h"
#include "headroom/v1/model.pb.h"

namespace headroom {

std::string CacheKeyBytes(const v1::AutotuneCacheKey& key);

// 16 hex digits (64-bit FNV-1a of CacheKeyBytes), stable across builds.
std::string CacheKeyId(const v1::AutotuneCacheKey& key);

// The key's source hash for a worker-run autotune: 16 hex digits of the
// 64-bit FNV-1a of the deterministic serialization of `spec` followed by
// that of `setup` (the graph and the training setup the memory model and the
// executor build from), so any change of the model or of precision,
// optimizer, checkpointing, positions or attention misses the cache. An
// unset precision hashes as fp32 and an unset optimizer as AdamW, the
// values they mean.
std::string SourceHash(const v1::ModelSpec& spec,
                       const v1::TrainingSetup& setup);

// The key an autotune of `autotune` (the request as planned, and the
// policy) on `gpu`, with a worker reporting `framework_versions`, produces:
// version 1; kind "sim" for a simulated card, else "gpu"; the card's name,
// memory bytes and compute capability ("9.0" -> [9, 0], none when it does
// not parse); torch, cuda and python from the versions (cuda falls back to
// the card's CUDA version), every other version under packages; the
// settings from the request (candidates ascending, batch_selection = the
// policy, autotune_microbatch = true); source = SourceHash(spec,
// MicrobatchSetup(request)); the ceiling = the largest candidate. The
// planner (from a worker's hello) and the worker (from its inventory) call
// this same function, so a cache hit at submission means the worker would
// write exactly this key. `autotune.request` must be valid
// (PlanMicrobatch accepted it).
v1::AutotuneCacheKey AutotuneKeyFor(
    const v1::AutotunePlan& autotune, const v1::ModelSpec& spec,
    const v1::GpuDevice& gpu,
    const google::protobuf::Map<std::string, std::string>& framework_versions);

}  // namespace headroom

#endif  // HEADROOM_CORE_MICROBATCH_CACHE_KEY_H_
