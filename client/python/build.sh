#!/usr/bin/env bash
# Builds the headroom_client package into OUTDIR: generates the messages and
# gRPC stubs of proto/headroom/v1 (package headroom.v1, which headroom_client
# and the torch harness import) and copies the wrapper, with its setup table,
# beside them. Then: PYTHONPATH=OUTDIR python3 -c 'import headroom_client'
# The CMake target headroom_python runs it into build/python, the one tree
# both use. `pip install client/python` generates the same (setup.py).
#
#   client/python/build.sh OUTDIR
#
# Needs Debian's protoc (protobuf-compiler, 3.21: the protos use proto3
# `optional`) and grpc_python_plugin (protobuf-compiler-grpc); PROTOC and
# GRPC_PYTHON_PLUGIN override where they are (CMake passes its own). Not
# python3-grpc-tools: its protoc 3.5 cannot compile these protos.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 OUTDIR" >&2
  exit 2
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd)
protoc=${PROTOC:-protoc}
plugin=${GRPC_PYTHON_PLUGIN:-$(command -v grpc_python_plugin || echo /usr/bin/grpc_python_plugin)}

# Only what this script writes is replaced, so stubs of a removed proto
# do not linger; anything else in OUTDIR stays.
rm -rf "$out/headroom" "$out/headroom_client"
# -I proto: the generated modules import each other as headroom.v1.*.
# grpc/health/v1 is left out: a generated top-level `grpc` package would
# shadow grpcio's own.
"$protoc" -I "$root/proto" --python_out="$out" --grpc_python_out="$out" \
  --plugin=protoc-gen-grpc_python="$plugin" "$root"/proto/headroom/v1/*.proto
touch "$out/headroom/__init__.py" "$out/headroom/v1/__init__.py"
cp -r "$here/headroom_client" "$out/headroom_client"
rm -rf "$out/headroom_client/__pycache__"
