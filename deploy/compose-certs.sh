#!/usr/bin/env bash
# The compose stack's one-shot `certs` service: a development CA, the planner's
# certificate and tokens from scripts/dev-certs.sh, laid out in the volumes the
# other services mount read-only (the same layout as the Kubernetes Secrets):
#
#   ROOT/planner-tls/{tls.crt,tls.key,ca.crt}   planner  /etc/headroom/tls
#   ROOT/planner-tokens/tokens                  planner  /etc/headroom/tokens
#   ROOT/ca/ca.crt                              worker   /etc/headroom/tls,
#                                               Prometheus /etc/prometheus/headroom-tls
#   ROOT/worker-token/token (role worker, named  worker   /etc/headroom/worker-token
#     worker-sim-l4), tls.crt, tls.key (a worker certificate, CN worker-sim-l4,
#     for mTLS)
#   ROOT/cli/{ca.crt,token-reader,token-operator,token-admin,operator.pem,operator-key.pem}
#                                               nobody: for `headroom` on the host
#
# Files belong to 10001:10001 (the images' user); keys and tokens are mode 600.
# Once made they are kept: remove the volumes (docker compose down -v) to make new.
#
# Usage: compose-certs.sh [ROOT]   (ROOT defaults to /certs; DEV_CERTS names
# scripts/dev-certs.sh, default /usr/local/bin/dev-certs.sh)
set -euo pipefail

root=${1:-/certs}
dev_certs=${DEV_CERTS:-/usr/local/bin/dev-certs.sh}
owner=${CERTS_OWNER:-10001:10001}

if [[ -s $root/planner-tls/tls.crt && -s $root/planner-tokens/tokens ]]; then
  echo "certs: kept the certificates and tokens already in $root (docker compose down -v makes new ones)" >&2
  exit 0
fi
if ! command -v openssl >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openssl >/dev/null
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# "planner" is the planner's name on the compose network (the worker and
# Prometheus dial planner:50051 / planner:9464); localhost and 127.0.0.1 are
# what the HEALTHCHECK and the published ports are reached by.
bash "$dev_certs" "$work" --planner-names localhost,planner,headroom-planner --workers worker-sim-l4

mkdir -p "$root"/{planner-tls,planner-tokens,ca,worker-token,cli}
install -m 644 "$work/planner.pem" "$root/planner-tls/tls.crt"
install -m 600 "$work/planner-key.pem" "$root/planner-tls/tls.key"
install -m 644 "$work/ca.pem" "$root/planner-tls/ca.crt"
install -m 600 "$work/tokens" "$root/planner-tokens/tokens"
install -m 644 "$work/ca.pem" "$root/ca/ca.crt"
install -m 600 "$work/token-worker-worker-sim-l4" "$root/worker-token/token"
install -m 644 "$work/worker-worker-sim-l4.pem" "$root/worker-token/tls.crt"
install -m 600 "$work/worker-worker-sim-l4-key.pem" "$root/worker-token/tls.key"
install -m 644 "$work/ca.pem" "$root/cli/ca.crt"
install -m 644 "$work/operator.pem" "$root/cli/operator.pem"
install -m 600 "$work/operator-key.pem" "$root/cli/operator-key.pem"
for role in reader operator admin; do
  install -m 600 "$work/token-$role" "$root/cli/token-$role"
done
# The CA's key is not kept: nothing more is signed with it.
chown -R "$owner" "$root"/{planner-tls,planner-tokens,ca,worker-token,cli}
echo "certs: dev CA, planner certificate (localhost, planner, headroom-planner, 127.0.0.1) and tokens in $root" >&2
