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
expect 2 "closest: fit" "$headroom" fitt
expect 2 "closest: --batch" "$headroom" fit --bathc 8
expect 3 "cannot reach the planner" "$headroom" --server 127.0.0.1:1 health
# Negative values of unsigned flags are refused, not wrapped.
expect 2 "--steps '-3' is invalid" "$headroom" probe submit --steps -3
expect 2 "--batch given 2 times" "$headroom" fit --batch 8 --batch 16
expect 2 "--deadline_ms '-5' is invalid; allowed 1..86400000" "$headroom" --deadline_ms -5 health
exit $fail
