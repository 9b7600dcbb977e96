#!/usr/bin/env bash
# A private throwaway PostgreSQL cluster for the tests, on loopback only.
# Usage: test-postgres.sh start|stop|url
#   start  creates the cluster (first time) and starts it; fine when it runs
#          already. Prints the server URL.
#   stop   stops it and removes its directory; fine when it is not there.
#   url    prints the server URL (for HEADROOM_TEST_PG_URL).
# Env: HEADROOM_TEST_PG_PORT (default 55432), HEADROOM_PG_BIN (default
# /usr/lib/postgresql/15/bin). The cluster, its log and its unix socket live
# in ${TMPDIR:-/tmp}/headroom-test-pg-PORT; trust auth, loopback and that
# socket only. initdb refuses root: as root it runs as the postgres user.
set -euo pipefail

port=${HEADROOM_TEST_PG_PORT:-55432}
bin=${HEADROOM_PG_BIN:-/usr/lib/postgresql/15/bin}
dir=${TMPDIR:-/tmp}/headroom-test-pg-$port
data=$dir/data
url="postgresql://postgres@127.0.0.1:$port/postgres"

as_owner() {
  if [[ $(id -u) -eq 0 ]]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

running() {
  [[ -f $data/PG_VERSION ]] && as_owner "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1
}

start() {
  if running; then
    echo "$url"
    return
  fi
  if [[ ! -f $data/PG_VERSION ]]; then
    rm -rf "$dir"
    mkdir -p "$dir"
    chmod 700 "$dir"
    [[ $(id -u) -eq 0 ]] && chown postgres: "$dir"
    as_owner "$bin/initdb" -D "$data" -U postgres -E UTF8 --locale=C.UTF-8 \
      --auth=trust >"$dir/initdb.log" 2>&1 ||
      { cat "$dir/initdb.log" >&2; exit 1; }
    # Trust, but only over the private socket and from loopback.
    as_owner tee "$data/pg_hba.conf" >/dev/null <<HBA
local all all trust
host  all all 127.0.0.1/32 trust
HBA
    # Throwaway data: durability off for speed.
    as_owner tee -a "$data/postgresql.conf" >/dev/null <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
max_connections = 200
fsync = off
synchronous_commit = off
full_page_writes = off
CONF
  fi
  if ! as_owner "$bin/pg_ctl" -D "$data" -l "$dir/server.log" -w -t 60 start \
    >/dev/null; then
    echo "test-postgres: the server did not start; its log:" >&2
    tail -n 30 "$dir/server.log" >&2 || true
    exit 1
  fi
  echo "$url"
}

stop() {
  if running; then
    as_owner "$bin/pg_ctl" -D "$data" -m fast -w -t 60 stop >/dev/null
  fi
  rm -rf "$dir"
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  url) echo "$url" ;;
  *)
    echo "usage: $0 start|stop|url" >&2
    exit 2
    ;;
esac
