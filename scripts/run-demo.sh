#!/usr/bin/env bash
# Builds the planner and CLI, then runs the planner on its embedded defaults (extra args go to it).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
scripts/build.sh headroom-planner headroom
# Defaults: gRPC on 127.0.0.1:50051, metrics on 127.0.0.1:9464, SQLite headroom.db,
# calibration data from data/ and models/. Every flag is also a HEADROOM_* env var.
exec build/server/headroom-planner "$@"
