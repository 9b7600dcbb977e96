#!/usr/bin/env bash
# Builds what the images ship: headroom-planner, headroom-worker, headroom and,
# where a CUDA compiler exists, headroom-cuda-probe, in build/ with the
# default configuration. The Dockerfiles' build stages and CI (scripts/test.sh)
# both run exactly `scripts/build-release.sh` with no arguments, so CI builds
# what the images ship in the same way; CI then builds the tests in the same
# build directory (tests/deploy/check_dockerfiles.py keeps the three in step).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/build.sh headroom-planner headroom-worker headroom
# The probe's target exists only when CMake found nvcc (worker/cuda).
if ninja -C "${BUILD_DIR:-build}" -t targets all | grep -q '^headroom-cuda-probe: '; then
  ninja -C "${BUILD_DIR:-build}" headroom-cuda-probe
else
  echo "build-release: no CUDA compiler, headroom-cuda-probe not built"
fi
