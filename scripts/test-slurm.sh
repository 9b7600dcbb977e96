#!/usr/bin/env bash
# Tests deploy/slurm/job_submit.lua with Debian's real slurmctld and slurmd on
# loopback: its Lua unit tests first (tests/slurm/job_submit_test.lua), then a
# one-node cluster (NodeName=localhost, Gres=gpu:l4:2 backed by /dev/null and
# /dev/zero, auth/none, no munge) in a temp dir with its own slurm.conf, the
# filter and headroom.conf beside it, and a headroom-planner on its embedded
# defaults. Submits with sbatch --hold (accepted jobs queue and never run):
#   a job that fits 1 x L4 (--comment)                      accepted
#   one that does not fit 1 x L4                            refused, naming 2 x L4
#   the same from #HEADROOM lines with --gpus=l4:2          accepted
#   a torchtune recipe (--job, relative to --chdir)         refused (BORDERLINE)
#   one with no Headroom description                        accepted
#   one with a shell metacharacter in its description       refused, nothing runs
#   the first job's comment changed to one that does not fit: update refused
#   the one that does not fit, after the planner stops      accepted (fail-open)
#   the same with a planner that never answers              accepted (timeout)
# and prints every submission's answer and the filter's log lines. Exits
# non-zero on any mismatch. Every process it starts is stopped on exit.
# Env: HEADROOM_BIN_DIR (default build): headroom-planner and headroom, in
# server/ and client/ below it or in it. Run as root in CI; as another user
# slurmd runs jobs as that user only.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

bin_dir=${HEADROOM_BIN_DIR:-build}
find_bin() {
  local sub=$1 name=$2
  for p in "$bin_dir/$sub/$name" "$bin_dir/$name"; do
    [[ -x $p ]] && { realpath "$p"; return; }
  done
  echo "test-slurm: no $name in $bin_dir/$sub or $bin_dir (set HEADROOM_BIN_DIR)" >&2
  exit 1
}
planner_bin=$(find_bin server headroom-planner)
cli_bin=$(find_bin client headroom)
for tool in lua5.1 slurmctld slurmd sbatch scontrol sinfo python3; do
  command -v "$tool" >/dev/null ||
    { echo "test-slurm: $tool is missing (scripts/install-deps.sh installs it)" >&2; exit 1; }
done

lua5.1 tests/slurm/job_submit_test.lua

dir=$(mktemp -d "${TMPDIR:-/tmp}/headroom-test-slurm.XXXXXX")
pids=()
cleanup() {
  local rc=$?
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  if [[ $rc -ne 0 ]]; then
    for log in slurmctld.log slurmd.log planner.log; do
      [[ -f $dir/$log ]] || continue
      echo "--- $log (last 20 lines)" >&2
      tail -n 20 "$dir/$log" >&2
    done
  fi
  rm -rf "$dir"
}
trap cleanup EXIT

# wait_for SECONDS WHAT COMMAND...: polls COMMAND until it succeeds.
wait_for() {
  local limit=$1 what=$2
  shift 2
  local deadline=$((SECONDS + limit))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      echo "test-slurm: $what not within ${limit}s" >&2
      return 1
    fi
    sleep 0.2
  done
}

read -r ctld_port slurmd_port planner_port < <(python3 -c '
import socket
socks = [socket.socket() for _ in range(3)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])')
planner_addr=127.0.0.1:$planner_port

# The planner on its embedded defaults, with a store of its own.
"$planner_bin" --listen "$planner_addr" --http_listen= --db "$dir/headroom.db" \
  >"$dir/planner.log" 2>&1 &
planner_pid=$!
pids+=("$planner_pid")
wait_for 60 "the planner answering on $planner_addr" \
  "$cli_bin" --server "$planner_addr" health

user=$(id -un)
mkdir -p "$dir/state" "$dir/spool"
cat >"$dir/slurm.conf" <<EOF
ClusterName=headroomtest
SlurmctldHost=localhost
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/none
CredType=cred/none
SlurmUser=$user
SlurmdUser=$user
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
JobSubmitPlugins=lua
NodeName=localhost NodeAddr=127.0.0.1 CPUs=1 RealMemory=100 Gres=gpu:l4:2 State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
# Two fake GPUs: slurmd's gres/gpu counts the device files of a record
# (22.05 drops a gpu record without File=), and they must be character or
# block devices.
cat >"$dir/gres.conf" <<EOF
AutoDetect=off
NodeName=localhost Name=gpu Type=l4 File=/dev/null,/dev/zero
EOF
# slurmd initialises a cgroup plugin whatever the proctrack and task plugins
# (slurmd.c: cgroup_g_init); cgroup/v1's init() touches no cgroup file
# system, where v2's needs a writable, delegated one (SchedMD/slurm
# src/plugins/cgroup/v1/cgroup_v1.c and v2/cgroup_v2.c init() @ tag
# slurm-22-05-8-1, d525b6872a106d32916b33a8738f12510ec7cf04). With
# proctrack/linuxproc, task/none and held jobs no cgroup is ever made, so
# v1 lets slurmd start on any host, a container's read-only cgroup2 included.
echo "CgroupPlugin=cgroup/v1" >"$dir/cgroup.conf"
cp deploy/slurm/job_submit.lua "$dir/"
cat >"$dir/headroom.conf" <<EOF
planner = $planner_addr
cli = $cli_bin
timeout_s = 10
fail_open = true
allow_borderline = false
gpu_type.l4 = L4
gpu_type.h100 = H100
EOF
export SLURM_CONF=$dir/slurm.conf

ctld_up() { [[ $(scontrol ping) == *"is UP"* ]]; }
node_idle() { [[ $(sinfo -h -n localhost -o "%T %G") == "idle gpu:l4:2" ]]; }
slurmctld -D -f "$SLURM_CONF" >"$dir/slurmctld.out" 2>&1 &
pids+=("$!")
wait_for 60 "slurmctld up (scontrol ping)" ctld_up
slurmd -D -N localhost -f "$SLURM_CONF" >"$dir/slurmd.out" 2>&1 &
pids+=("$!")
wait_for 60 "node localhost idle with gpu:l4:2" node_idle

failures=0
log=()
# submit NAME EXPECT(accepted|rejected) EXPECTED_TEXT SBATCH_ARGS...: EXPECTED_TEXT
# must appear in sbatch's output (its error message when refused).
submit() {
  local name=$1 expect=$2 text=$3
  shift 3
  local out rc=0 t0 ms
  t0=$(date +%s%N)
  out=$(cd "$dir" && sbatch --hold -o /dev/null "$@" 2>&1) || rc=$?
  ms=$((($(date +%s%N) - t0) / 1000000))
  local got=accepted
  [[ $rc -eq 0 && $out == *"Submitted batch job"* ]] || got=rejected
  log+=("$(printf '%-9s %s (%d ms)\n          %s' "${got^^}" "$name" "$ms" "${out//$'\n'/$'\n'          }")")
  if [[ $got != "$expect" || $out != *"$text"* ]]; then
    echo "test-slurm: MISMATCH: $name: expected $expect with \"$text\"; sbatch exited $rc: $out" >&2
    failures=$((failures + 1))
  fi
}

# llama-3.2-1b, full fine-tune in bf16 under FSDP (full shard), batch 1 of
# 512 positions, checkpointing: on one L4 the allocator's peak alone is
# 25.09 GB > 24 GB (DOES_NOT_FIT); on two the device upper bound is 19.51 GB
# and 19.51 x 1.15 = 22.44 GB <= 24 GB (FITS): the smallest count is 2. On
# one H100 (80 GB) it fits. (headroom fit ... --gpu L4,H100 --gpus auto.)
big="--model llama-3.2-1b --batch 1 --precision bf16 --positions 512 --checkpointing --parallel fsdp-full"
# The same with LoRA rank 16 at batch 4: 15.32 x 1.15 = 17.62 GB on one L4.
small="--model llama-3.2-1b --batch 4 --precision bf16 --positions 512 --lora_rank 16"

submit "fits 1 x L4 (--comment: $small)" accepted "Submitted batch job" \
  --gres=gpu:l4:1 --comment "headroom: $small" --wrap true
submit "does not fit 1 x L4 (--comment: $big)" rejected \
  "the smallest count that fits: 2 x L4 with --parallel fsdp-full (--gres=gpu:l4:2); or another type: --gres=gpu:h100:1" \
  --gres=gpu:l4:1 --comment "headroom: $big" --wrap true
cat >"$dir/big.sh" <<EOF
#!/bin/sh
#SBATCH --gpus=l4:2
#HEADROOM --model llama-3.2-1b --batch 1 --precision bf16
#HEADROOM --positions 512 --checkpointing --parallel fsdp-full
true
EOF
submit "fits 2 x L4 (#HEADROOM lines, --gpus=l4:2)" accepted "Submitted batch job" "$dir/big.sh"
# torchtune's llama3_1 8B LoRA single-device recipe at its batch 16: on one
# L4 the device figure 22.22 GB fits 24 GB but 29.10 x 1.15 does not:
# BORDERLINE, refused under allow_borderline = false; an H100 fits.
submit "BORDERLINE 1 x L4 (--job relative to --chdir)" rejected "BORDERLINE" \
  --chdir="$repo/tests/data/jobs" --gres=gpu:l4:1 \
  --comment "headroom: --job torchtune-llama3_1-8B_lora_single_device.yaml" --wrap true
submit "no Headroom description" accepted "Submitted batch job" --gres=gpu:l4:1 --wrap true
submit "a shell metacharacter in the description" rejected \
  "has a character outside A-Za-z0-9._,/:=+-" \
  --gres=gpu:l4:1 --comment "headroom: --model gpt2;touch $dir/pwned --batch 1" --wrap true
if [[ -e $dir/pwned ]]; then
  echo "test-slurm: MISMATCH: the description's command ran" >&2
  failures=$((failures + 1))
fi

# A held job's comment changed to one that does not fit its 1 x L4: the
# filter's slurm_job_modify refuses the update (Slurm shows users no message
# from job_modify; the reason is in slurmctld's log).
first_job=$(squeue -h -o %i | sort -n | head -1)
out=$(scontrol update jobid="$first_job" comment="headroom: $big" 2>&1) && rc=0 || rc=$?
log+=("$(printf '%-9s %s\n          %s' "$([[ $rc -eq 0 ]] && echo UPDATED || echo REFUSED)" \
  "scontrol update jobid=$first_job comment=\"headroom: $big\"" "${out:-(no output)}")")
if [[ $rc -eq 0 || $(squeue -h -j "$first_job" -O comment) == *fsdp-full* ]]; then
  echo "test-slurm: MISMATCH: the update to a job that does not fit was accepted: $out" >&2
  failures=$((failures + 1))
fi

# The planner stops: the filter cannot ask, and lets the job through.
kill -TERM "$planner_pid"
planner_gone() { ! kill -0 "$planner_pid" 2>/dev/null; }
wait_for 30 "the planner stopped" planner_gone
submit "does not fit 1 x L4, planner stopped (fail-open)" accepted "Submitted batch job" \
  --gres=gpu:l4:1 --comment "headroom: $big" --wrap true
if ! grep -q "event=fail_open.*cannot reach the planner" "$dir/slurmctld.log"; then
  echo "test-slurm: MISMATCH: no event=fail_open for the stopped planner in slurmctld's log" >&2
  failures=$((failures + 1))
fi

# A planner that accepts the connection and never answers: the CLI is
# stopped after timeout_s (the filter re-reads headroom.conf on every job).
python3 -c '
import signal, socket, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(16)
open(sys.argv[1] + ".tmp", "w").write(str(s.getsockname()[1]))
__import__("os").rename(sys.argv[1] + ".tmp", sys.argv[1])
signal.pause()' "$dir/silent.port" &
pids+=("$!")
wait_for 30 "the silent listener's port" test -s "$dir/silent.port"
sed -i -e "s/^planner = .*/planner = 127.0.0.1:$(cat "$dir/silent.port")/" \
  -e "s/^timeout_s = .*/timeout_s = 1/" "$dir/headroom.conf"
start=$SECONDS
submit "does not fit 1 x L4, planner silent, timeout_s = 1 (fail-open)" accepted \
  "Submitted batch job" --gres=gpu:l4:1 --comment "headroom: $big" --wrap true
if ! grep -q "event=fail_open.*no answer within timeout_s = 1" "$dir/slurmctld.log" ||
  ((SECONDS - start > 10)); then
  echo "test-slurm: MISMATCH: no timely event=fail_open for the silent planner" >&2
  failures=$((failures + 1))
fi

echo "test-slurm: submissions (slurm $(sbatch --version | awk '{print $2}'), planner $planner_addr)"
printf '%s\n' "${log[@]}"
echo "test-slurm: the filter's log (slurmctld.log):"
grep -o "lua: headroom: .*" "$dir/slurmctld.log" || true
if [[ $failures -ne 0 ]]; then
  echo "test-slurm: $failures mismatch(es)" >&2
  exit 1
fi
echo "test-slurm: OK"
