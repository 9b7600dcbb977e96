#!/usr/bin/env bash
# `cmake --install` lays out a tree the programs run from, from any working
# directory: the planner finds the installed catalog and data (its serving
# line names them), the CLI the installed catalog.
#   check_install.sh BUILD_DIR
set -euo pipefail
build=$1
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
cmake --install "$build" --prefix "$prefix" >/dev/null
cd /
log=$prefix/planner.log
"$prefix/bin/headroom-planner" --db=:memory: --listen=127.0.0.1:0 --http_listen= >"$log" 2>&1 &
planner=$!
for _ in $(seq 600); do
  grep -q "event=serving" "$log" && break
  kill -0 "$planner" 2>/dev/null || break
  sleep 0.1
done
kill "$planner" 2>/dev/null || true
wait "$planner" 2>/dev/null || true
grep -q "event=serving.* models=$prefix/share/headroom/models" "$log" || {
  echo "check_install: the installed planner did not serve from $prefix/share/headroom:" >&2
  tail -5 "$log" >&2
  exit 1
}
out=$("$prefix/bin/headroom" model inspect bert-base)
[[ $out == "bert-base: 31120896 parameters"* ]] || {
  echo "check_install: headroom model inspect from / printed: ${out:0:200}" >&2
  exit 1
}
# The full models of models/hf/ are installed with the catalog.
out=$("$prefix/bin/headroom" model inspect llama-3.2-1b)
[[ $out == "llama-3.2-1b: 1235814400 parameters"* && $out == *"models/hf/llama-3.2-1b.json"* ]] || {
  echo "check_install: headroom model inspect llama-3.2-1b from / printed: ${out:0:200}" >&2
  exit 1
}
# The published runs, with the config files their rows name beside them.
[[ -f $prefix/share/headroom/data/published-runs.jsonl && -f $prefix/share/headroom/data/published-configs/llama-2-7b.json ]] || {
  echo "check_install: data/published-runs.jsonl or data/published-configs/ is not installed" >&2
  exit 1
}
[[ -x $prefix/bin/headroom_torch_probe.py ]] || {
  echo "check_install: the torch harness is not beside headroom-worker" >&2
  exit 1
}
[[ -f $prefix/bin/headroom_harness/cli.py ]] || {
  echo "check_install: the torch harness's package is not beside headroom_torch_probe.py" >&2
  exit 1
}
# The one generated headroom.v1 (messages and stubs) with the client beside
# it, where the harness looks (../share/headroom/python).
for f in headroom/v1/model_pb2.py headroom/v1/planner_pb2_grpc.py headroom_client/client.py; do
  [[ -f $prefix/share/headroom/python/$f ]] || {
    echo "check_install: share/headroom/python/$f is not installed" >&2
    exit 1
  }
done
echo "check_install: OK ($prefix)"
