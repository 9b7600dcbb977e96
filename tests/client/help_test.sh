#!/usr/bin/env bash
# Every binary's --help and -h exit 0 and list its flags with defaults; the
# CLI's usage errors exit 2. Usage: help_test.sh HEADROOM PLANNER WORKER
set -uo pipefail
headroom=$1 planner=$2 worker=$3
fail=0
expect() {  # expect CODE PATTERN COMMAND...
  local code=$1 pattern=$2; shift 2
  local output; output=$("$@" 2>&1); local got=$?
  if [[ $got -ne $code ]] || ! grep -qF -- "$pattern" <<<"$output"; then
    echo "FAIL: $* exited $got (want $code), output lacks '$pattern':"
    echo "$output" | head -5
    fail=1
  fi
}
for h in -h --help; do
  expect 0 "--db" "$planner" $h
  expect 0 'default: "headroom.db"' "$planner" $h
  expect 0 "--planner" "$worker" $h
  expect 0 "Exit codes:" "$headroom" $h
  expect 0 "--batch TEXT" "$headroom" fit $h
done
# --version: one line naming the program, its version and commit.
expect 0 "headroom-planner " "$planner" --version
expect 0 "headroom-worker " "$worker" --version
expect 0 "headroom " "$headroom" --version
for bin in "$planner" "$worker" "$headroom"; do
  expect 0 " (commit " "$bin" --version
done
# The planner's and worker's --help: the usage first, then only their own
# flags (no absl internals, no source paths; --helpfull has those).
for bin in "$planner" "$worker"; do
  first=$("$bin" --help 2>&1 | head -1)
  if [[ $first != Usage:* ]]; then
    echo "FAIL: $bin --help starts with '$first', not 'Usage:'"; fail=1
  fi
  if "$bin" --help 2>&1 | grep -q -e "absl/" -e "--flagfile"; then
    echo "FAIL: $bin --help lists absl's flags or source paths"; fail=1
  fi
  expect 0 "--flagfile" "$bin" --helpfull
done
expect 2 "closest: fit" "$headroom" fitt
expect 2 "closest: --batch" "$headroom" fit --bathc 8
expect 3 "cannot reach the planner" "$headroom" --server 127.0.0.1:1 health
# Negative values of unsigned flags are refused, not wrapped.
expect 2 "--steps '-3' is invalid" "$headroom" probe submit --steps -3
expect 2 "--batch given 2 times" "$headroom" fit --batch 8 --batch 16
expect 2 "--deadline_ms '-5' is invalid; allowed 1..86400000" "$headroom" --deadline_ms -5 health
exit $fail
