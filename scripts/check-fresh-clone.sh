#!/usr/bin/env bash
# Clones this repository (its committed HEAD) into a temporary directory and
# runs scripts/test.sh there twice in a row; fails if either run fails. Not
# run by CI: it takes about ten minutes per run. Usage: check-fresh-clone.sh
set -euo pipefail
cd "$(dirname "$0")/.."

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# The test PostgreSQL runs as its own user and starts in the working
# directory: it must be able to enter the clone (mktemp -d makes it 700).
chmod 755 "$tmp"
git clone -q --no-hardlinks . "$tmp/headroom"
cd "$tmp/headroom"
for run in 1 2; do
  echo "check-fresh-clone: run $run of scripts/test.sh in $tmp/headroom"
  if ! scripts/test.sh; then
    echo "check-fresh-clone: run $run of scripts/test.sh failed" >&2
    exit 1
  fi
done
echo "check-fresh-clone: scripts/test.sh passed twice in a fresh clone"
