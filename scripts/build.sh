#!/usr/bin/env bash
# Configures and builds Headroom with CMake + Ninja. Usage: build.sh [-D... cmake args] [targets]
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${BUILD_DIR:-build}
export CCACHE_DIR=${CCACHE_DIR:-${HOME:-/tmp}/.cache/ccache}
# Paths under the checkout hash as relative ones and the build directory's
# path is not hashed, so a second clone or worktree on the same machine
# reuses the first one's objects (debug info may then name the first path).
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}

cmake_args=()
targets=()
for arg in "$@"; do
  case $arg in
    -*) cmake_args+=("$arg") ;;
    *) targets+=("$arg") ;;
  esac
done

cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${cmake_args[@]}"
ninja -C "$build_dir" "${targets[@]}"
