#!/usr/bin/env bash
# Packs what scripts/device-check.sh runs on a GPU node that has no gRPC,
# protobuf or Abseil: the planner, worker and CLI binaries built here and the
# Debian shared libraries they load (glibc and libstdc++ excepted: the node's
# own, newer ones serve), into .devbundle/ (git-ignored).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh headroom-planner headroom-worker headroom
rm -rf .devbundle
mkdir -p .devbundle/bin .devbundle/lib
cp build/server/headroom-planner build/worker/headroom-worker \
  build/client/headroom .devbundle/bin/
for b in .devbundle/bin/*; do ldd "$b" | awk '/=>/ {print $3}'; done | sort -u |
  grep -v -E 'libc\.so|libm\.so|libstdc\+\+|libgcc_s|ld-linux|libpthread|libdl\.so|librt\.so' |
  xargs -I{} cp -L {} .devbundle/lib/
strip .devbundle/bin/*
grep -qx '/.devbundle/' .git/info/exclude 2>/dev/null || echo '/.devbundle/' >>.git/info/exclude
du -sh .devbundle
