#!/usr/bin/env bash
# clang-tidy (the checks in .clang-tidy) over the C++ files a change touched:
#   scripts/check-tidy.sh [BASE] [BUILD_DIR]
# BASE is the revision the change is measured from (default HEAD~1: the last
# commit, which is what CI checks; pass origin/main or a branch point to check
# a whole branch). Uses BUILD_DIR/compile_commands.json (default build), so
# run it after a build. Exits 1 on any finding; a file deleted or not in the
# compile database (a header, a test outside the build) is skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

base=${1:-HEAD~1}
build_dir=${2:-build}
if ! git rev-parse -q --verify "${base}^{commit}" >/dev/null; then
  # A clone with one commit: the change is that commit.
  base=$(git hash-object -t tree /dev/null)
fi
mapfile -t files < <(git diff --name-only --diff-filter=AM "$base" -- \
  'base/*.cc' 'core/*.cc' 'io/*.cc' 'pages/*.cc' 'server/*.cc' \
  'client/*.cc' 'worker/*.cc' 'common/*.cc')
checked=()
for f in "${files[@]}"; do
  grep -q "\"file\": \".*/$f\"" "$build_dir/compile_commands.json" && checked+=("$f")
done
if [[ ${#checked[@]} -eq 0 ]]; then
  echo "check-tidy: no C++ source changed since $base"
  exit 0
fi
echo "check-tidy: ${#checked[@]} files changed since $base"
clang-tidy -p "$build_dir" --quiet --warnings-as-errors='*' "${checked[@]}"
echo "check-tidy: clean"
