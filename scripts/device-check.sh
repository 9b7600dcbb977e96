#!/usr/bin/env bash
# One prepared run on a GPU node: a real planner (SQLite) and a real
# headroom-worker with the torch and cuda executors; probes of catalog
# templates at the batches the reference measured on H100; the planner's
# predictions for the same card beside them. Everything lands in $OUT.
#
# Binaries come prebuilt in .devbundle/ (scripts/device-bundle.sh makes it:
# bin/ and the Debian libs they need, lib/); the CUDA probe is built on the
# node with its nvcc.
#   OUT=/tmp/out scripts/device-check.sh            # on the GPU node
#   DEVICE_EXECUTORS=sim OUT=/tmp/out scripts/device-check.sh   # dry run
set -u
OUT=${OUT:-/tmp/headroom-device-out}
mkdir -p "$OUT"
EXECUTORS=${DEVICE_EXECUTORS:-torch,cuda}
GPU=${DEVICE_GPU:-H200}
BIN=${BIN:-.devbundle/bin}
export LD_LIBRARY_PATH="$PWD/.devbundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
PORT=50091
HL="$BIN/headroom --server 127.0.0.1:$PORT --deadline_ms 20000"
# template:batches, the H100 batch of memory-runs.jsonl (32) and a smaller one.
PROBES=${DEVICE_PROBES:-"gpt2:8,32 bert-base:32 vit-b16:32 t5-small:32 llama3-block:8,32 swin-tiny:32 unet:32 video-dit:32 dit-xl2:32 clip-vit-b32:32 transformer-block:32 matryoshka-embed:32 resnet-block:32 simple-cnn:32 dlrm:32 qwen2-vl:32"}

log() { echo "[$(date +%T)] $*" | tee -a "$OUT/probes.log"; }
log "node: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null)"
log "python: $(python3 -c 'import torch,sys;print(sys.version.split()[0],"torch",torch.__version__,"cuda",torch.version.cuda)' 2>&1 | tail -1)"

CUDA_PROBE=""
if [[ "$EXECUTORS" == *cuda* ]]; then
  (cmake -S worker/cuda -B /tmp/cudaprobe -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 \
     -DCMAKE_BUILD_TYPE=Release >/tmp/cudaprobe.log 2>&1 &&
   ninja -C /tmp/cudaprobe headroom-cuda-probe >>/tmp/cudaprobe.log 2>&1) &
  BUILD_PID=$!
fi

rm -f /tmp/hd.db*
$BIN/headroom-planner --listen 127.0.0.1:$PORT --http_listen 127.0.0.1:9491 \
  --db /tmp/hd.db --models_dir models --runs data/memory-runs.jsonl \
  --energy_curves data/energy-curves.json >"$OUT/planner.log" 2>&1 &
PLANNER=$!
for i in $(seq 1 100); do $HL health >/dev/null 2>&1 && break; sleep 0.2; done
log "planner: $($HL health 2>&1)"

if [[ -n "${BUILD_PID:-}" ]]; then
  wait $BUILD_PID && CUDA_PROBE=/tmp/cudaprobe/headroom-cuda-probe
  log "cuda probe build: ${CUDA_PROBE:-failed (see cuda probe log)} $(tail -2 /tmp/cudaprobe.log | tr '\n' ' ')"
fi
WORKER_ARGS=(--planner 127.0.0.1:$PORT --worker_id node-1 --executors "$EXECUTORS"
  --python python3 --harness worker/harness/headroom_torch_probe.py --sample_ms 20)
[[ -n "$CUDA_PROBE" ]] && WORKER_ARGS+=(--cuda_probe "$CUDA_PROBE")
[[ "$EXECUTORS" == sim ]] && WORKER_ARGS+=(--sim_gpu "$GPU")
$BIN/headroom-worker "${WORKER_ARGS[@]}" >"$OUT/worker.log" 2>&1 &
WORKER=$!
for i in $(seq 1 150); do
  $HL workers 2>/dev/null | grep -q "node-1  connected" && break; sleep 0.2
done
$HL workers >"$OUT/workers.txt" 2>&1
cat "$OUT/workers.txt"

EXEC=${EXECUTORS%%,*}
: >"$OUT/predictions.jsonl"
for item in $PROBES; do
  t=${item%%:*}; b=${item#*:}
  $HL fit --model "$t" --batch "$b" --gpu "$GPU" --json | tr -d '\n' >>"$OUT/predictions.jsonl"
  echo >>"$OUT/predictions.jsonl"
  log "probe $t batches $b"
  timeout 240 $HL probe submit --model "$t" --batch "$b" --gpu "$GPU" \
    --executor "$EXEC" --watch --watch_timeout_s 230 2>&1 | tee -a "$OUT/probes.log"
done
if [[ -n "$CUDA_PROBE" ]]; then
  log "cuda probe"
  timeout 200 $HL probe submit --model simple-cnn --batch 1 --gpu "$GPU" \
    --executor cuda --watch --watch_timeout_s 190 2>&1 | tail -3 | tee -a "$OUT/probes.log"
fi
$HL probe list --json >"$OUT/probes.json" 2>&1
$HL refit --dry_run 2>&1 | tail -5 | tee -a "$OUT/probes.log"
curl -s 127.0.0.1:9491/metrics 2>/dev/null | grep -E "^(DCGM|headroom_(workers|probe|fleet))" \
  | tee -a "$OUT/probes.log" | tail -12
kill -TERM $WORKER; wait $WORKER
kill -TERM $PLANNER; wait $PLANNER
log "done"
