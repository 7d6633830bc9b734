#!/usr/bin/env bash
# Starts a local ATProto network (PLC, PDS, AppView) on loopback for the agent scenarios,
# with its own PostgreSQL cluster in a fresh state directory.
#
#   bash tests/atproto/start.sh
#
# Prints `DRUSE_ATPROTO {"plc":…,"pds":…,"appview":…,"startup_ms":…}` on standard output when
# every service answers, then keeps running until it gets SIGTERM/SIGINT or its standard
# input closes; either way it stops the network and PostgreSQL and removes its state.
# Needs `bash tests/atproto/install.sh` first (DRUSE_ATPROTO_HOME, as there).
# DRUSE_ATPROTO_PDS_PORT / _APPVIEW_PORT / _PLC_PORT fix ports; unset, free ports are chosen.
set -euo pipefail

home="${DRUSE_ATPROTO_HOME:-$HOME/.cache/druse/atproto}"
here="$(cd "$(dirname "$0")" && pwd)"
log() { printf '[atproto] %s\n' "$*" >&2; }

node="$home/node/bin/node"
if [ ! -x "$node" ] || [ ! -d "$home/env/node_modules/@atproto/dev-env" ]; then
  log "the network is not installed in $home: run bash tests/atproto/install.sh"
  exit 2
fi
pgbin=""
for d in /usr/lib/postgresql/*/bin; do [ -x "$d/initdb" ] && pgbin="$d"; done
[ -n "$pgbin" ] || { log "postgresql is not installed: run bash tests/atproto/install.sh"; exit 2; }

state="$(mktemp -d /tmp/druse-atproto.XXXXXX)"
chmod 755 "$state"
pgdata="$state/pg"
pgport="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
# PostgreSQL refuses to run as root: run it as the postgres user when we are root.
as_pg=()
if [ "$(id -u)" = 0 ]; then
  id postgres >/dev/null 2>&1 || useradd --system --home-dir /var/lib/postgresql postgres
  as_pg=(runuser -u postgres --)
  mkdir -p "$pgdata" && chown postgres "$pgdata"
fi

net_pid=""
cleanup() {
  trap - EXIT INT TERM
  if [ -n "$net_pid" ] && kill -0 "$net_pid" 2>/dev/null; then
    kill -TERM "$net_pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$net_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$net_pid" 2>/dev/null || true
  fi
  "${as_pg[@]}" "$pgbin/pg_ctl" -D "$pgdata" -m immediate -w stop >/dev/null 2>&1 || true
  rm -rf "$state"
}
trap cleanup EXIT
trap 'exit 0' INT TERM

t0=$(date +%s.%N)
"${as_pg[@]}" "$pgbin/initdb" -D "$pgdata" -U postgres --auth=trust -E UTF8 --no-sync >"$state/initdb.log" 2>&1 \
  || { cat "$state/initdb.log" >&2; exit 1; }
"${as_pg[@]}" "$pgbin/pg_ctl" -D "$pgdata" -w -l "$pgdata/server.log" \
  -o "-c listen_addresses=127.0.0.1 -p $pgport -k $pgdata -c fsync=off -c max_connections=200" start >/dev/null \
  || { cat "$pgdata/server.log" >&2; exit 1; }
log "postgresql on 127.0.0.1:$pgport in $(python3 -c "print(round($(date +%s.%N)-$t0,1))") s"

export DB_POSTGRES_URL="postgresql://postgres@127.0.0.1:$pgport/postgres"
export REDIS_HOST="${REDIS_HOST:-127.0.0.1:1}"   # dev-env insists on it; nothing connects
export NODE_ENV=development
export LOG_ENABLED="${LOG_ENABLED:-false}"
cd "$home/env"
cp "$here/network.mjs" "$home/env/network.mjs"
# Standard input is passed on, so the network stops when whoever started us goes away.
"$node" network.mjs <&0 &
net_pid=$!
wait "$net_pid"
