#!/usr/bin/env bash
# Builds the planner, the worker and the CLI, then runs the planner on its
# embedded defaults (extra args go to it) with one worker beside it: the GPUs
# of this machine when it has any (torch and cuda executors), else a
# simulated L4 whose results are labelled simulated. Ctrl-C stops both.
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
scripts/build.sh headroom-planner headroom headroom-worker
# Defaults: gRPC on 127.0.0.1:50051, metrics on 127.0.0.1:9464, SQLite headroom.db,
# calibration data from data/ and models/. Every flag is also a HEADROOM_* env var.
build/server/headroom-planner "$@" &
planner=$!
build/worker/headroom-worker --planner "${HEADROOM_LISTEN:-127.0.0.1:50051}" \
  --executors auto --sim_gpu L4 &
worker=$!
trap 'kill -TERM $worker $planner 2>/dev/null; wait $worker $planner 2>/dev/null' INT TERM EXIT
wait $planner
