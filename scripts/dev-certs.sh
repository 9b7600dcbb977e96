#!/usr/bin/env bash
# Makes a development CA, the planner's certificate, client certificates for
# workers and operators (mTLS), and bearer tokens with the planner's tokens
# file. For development and tests; production certificates come from your
# CA (see deploy/k8s-examples/cert-manager.yaml).
#
# Usage: dev-certs.sh DIR [--planner-names a,b,...] [--workers w1,w2,...]
#   DIR/ca.pem                      the CA (give it as --tls_ca, --tls_client_ca)
#   DIR/planner.pem, planner-key.pem  --tls_cert / --tls_key of the planner
#   DIR/worker-ID.pem, -key.pem     a worker's client certificate (CN = ID),
#                                   issued for workers (see WORKER_EKU)
#   DIR/operator.pem, -key.pem      a CLI client certificate (CN = operator),
#                                   not a worker's: the planner refuses it
#                                   for Fleet.Connect
#   DIR/tokens                      the planner's --tokens_file (hashes only)
#   DIR/token-{reader,operator,admin}  the tokens themselves (mode 600)
#   DIR/token-worker-ID             a worker's token (role worker, NAME = ID:
#                                   it connects as worker ID only)
#
# A worker certificate carries, besides clientAuth, the extended key usage
# WORKER_EKU below: the planner lets only such certificates connect as a
# worker (server/service/access.h, kWorkerKeyUsageOid). It is an OID under
# the 2.25 arc (ITU-T X.667, a UUID as an integer: no registration needed).
# Your own CA issues worker certificates with it, e.g. OpenSSL's
# `extendedKeyUsage=clientAuth,2.25.219349244869131494077330307785983357729`.
set -euo pipefail

dir=${1:?usage: dev-certs.sh DIR [--planner-names a,b] [--workers w1,w2]}
shift
names="localhost,headroom-planner"
workers="sim-worker"
while [[ $# -gt 0 ]]; do
  case $1 in
    --planner-names) names=$2; shift 2 ;;
    --workers) workers=$2; shift 2 ;;
    *) echo "dev-certs: unknown argument $1 (allowed --planner-names, --workers)" >&2; exit 2 ;;
  esac
done
WORKER_EKU=2.25.219349244869131494077330307785983357729
command -v openssl >/dev/null || { echo "dev-certs: needs openssl (apt-get install openssl)" >&2; exit 2; }

mkdir -p "$dir"
umask 077
days=825

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days "$days" \
  -subj "/CN=Headroom dev CA" -keyout "$dir/ca-key.pem" -out "$dir/ca.pem" 2>/dev/null

# issue NAME CN SAN EXTENDED_KEY_USAGE
issue() {
  local name=$1 cn=$2 san=$3 usage=$4
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$cn" \
    -keyout "$dir/$name-key.pem" -out "$dir/$name.csr" 2>/dev/null
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$usage"
    [[ -n $san ]] && echo "subjectAltName=$san"
  } >"$dir/$name.ext"
  openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca-key.pem" \
    -CAcreateserial -days "$days" -extfile "$dir/$name.ext" -out "$dir/$name.pem" 2>/dev/null
  rm -f "$dir/$name.csr" "$dir/$name.ext"
}

san="IP:127.0.0.1,IP:::1"
IFS=, read -ra planner_names <<<"$names"
for n in "${planner_names[@]}"; do san+=",DNS:$n"; done
issue planner headroom-planner "$san" serverAuth
IFS=, read -ra worker_ids <<<"$workers"
for w in "${worker_ids[@]}"; do issue "worker-$w" "$w" "" "clientAuth,$WORKER_EKU"; done
issue operator operator "" clientAuth

: >"$dir/tokens"
echo "# NAME ROLE SHA256HEX (made by scripts/dev-certs.sh)" >>"$dir/tokens"
for role in reader operator admin; do
  token=$(openssl rand -hex 24)
  printf '%s\n' "$token" >"$dir/token-$role"
  printf 'dev-%s %s %s\n' "$role" "$role" "$(printf %s "$token" | sha256sum | cut -d' ' -f1)" >>"$dir/tokens"
done
for w in "${worker_ids[@]}"; do
  token=$(openssl rand -hex 24)
  printf '%s\n' "$token" >"$dir/token-worker-$w"
  printf '%s worker %s\n' "$w" "$(printf %s "$token" | sha256sum | cut -d' ' -f1)" >>"$dir/tokens"
done
chmod 644 "$dir"/*.pem "$dir/tokens"
chmod 600 "$dir"/*-key.pem "$dir"/token-*
echo "dev-certs: CA, planner, ${#worker_ids[@]} worker(s) (certificates and tokens), operator and tokens in $dir" >&2
