#!/usr/bin/env bash
# Configures and builds Headroom with CMake + Ninja. Usage: build.sh [-D... cmake args] [targets]
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${BUILD_DIR:-build}
export CCACHE_DIR=${CCACHE_DIR:-${HOME:-/tmp}/.cache/ccache}

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
