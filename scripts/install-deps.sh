#!/usr/bin/env bash
# Installs Headroom's Debian 12 build dependencies; installs only what is missing (idempotent).
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  libspdlog-dev prometheus-cpp-dev libcpp-httplib-dev openssl libsqlite3-dev sqlite3
  libgtest-dev libgmock-dev libbenchmark-dev nlohmann-json3-dev clang-format
  libonnx-dev
  # The CLI's subcommands, flags and --help (client/cli.cc).
  libcli11-dev
  # SHA-256 of model keys (core/evidence/model_key.cc).
  libssl-dev
  # The scheduler extender's request bodies (core/scheduling/extender.cc).
  libsimdjson-dev
  # Job config files (--job: litgpt, torchtune, axolotl, TRL, accelerate YAML; core/jobs/).
  libyaml-cpp-dev
  # libpq for the PostgreSQL store; the server for its tests (scripts/test-postgres.sh).
  libpq-dev postgresql
  # The torch harness's test builds every catalog template on the CPU; its
  # pytest suite (tests/worker/harness).
  python3-torch python3-pytest
  # tests/deploy: manifest schemas, the dashboard, the Dockerfiles.
  python3-jsonschema python3-yaml
  # client/python: the headroom_client package's runtime and its tests
  # (tests/python; python3-venv for its pip install test).
  python3-grpcio python3-protobuf python3-venv
  # tests/pages: /calibration rendered in headless Chromium.
  chromium
  # scripts/check-thread-safety.py: clang's -Wthread-safety over our sources.
  clang-14
  # scripts/check-tidy.sh: clang-tidy (.clang-tidy) over the last commit's C++.
  clang-tidy
  # scripts/test-slurm.sh: deploy/slurm/job_submit.lua under a real slurmctld
  # and slurmd (22.05, job_submit/lua links Lua 5.1), and its unit tests.
  slurmctld slurmd slurm-client lua5.1
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null | grep -qx installed || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

sudo=()
[[ $(id -u) -eq 0 ]] || sudo=(sudo)
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
