#!/usr/bin/env bash
# A druse swarm on this machine: one management node and three edge nodes on 127.0.0.1, with
# mDNS off and every edge bootstrapping from the management node. Stop it with Ctrl-C or
# SIGTERM: every node gets SIGTERM (it leaves the swarm and flushes its store) and is waited for.
#
#   bash deploy/local-swarm.sh
#
# Everything is configurable through the environment:
#   SWARM_DIR           data dirs, trust list and logs (default: a new temp dir; kept after exit)
#   BIN_DIR             where druse-node and druse-mgmt are (default: target/release, then
#                       target/debug; if neither has both, `cargo build --release` builds them)
#   SWARM_HOST          the address every listener binds (default 127.0.0.1)
#   EDGES               how many edge nodes (default 3)
#   MGMT_P2P_PORT       management P2P port, TCP and QUIC (default 4010)
#   MGMT_API_PORT       management API port (default 7710)
#   MGMT_METRICS_PORT   management metrics port (default 9465)
#   EDGE_P2P_BASE       edge n listens for P2P on EDGE_P2P_BASE+n (default 4000: 4001, 4002, …)
#   EDGE_API_BASE       edge n's API is on EDGE_API_BASE+n (default 7700: 7701, 7702, …)
#   EDGE_METRICS_BASE   edge n's metrics are on EDGE_METRICS_BASE+n (default 9400: 9401, 9402, …)
#   READY_TIMEOUT       seconds to wait for each node's /healthz (default 60)
#   STOP_TIMEOUT        seconds to wait for the nodes after SIGTERM before SIGKILL (default 30)
#   LOG_FORMAT          text or json (default text)
#   ANOMALY_NEW_PEERS   the management node's anomaly detector raises weather when this many new
#                       peers join within a minute (default 20)
#   ANOMALY_LISTINGS    ... or when one peer offers this many listings within a minute (default
#                       30; set 5 to watch it fire: a peer may publish only 10 a minute)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

SWARM_HOST="${SWARM_HOST:-127.0.0.1}"
EDGES="${EDGES:-3}"
MGMT_P2P_PORT="${MGMT_P2P_PORT:-4010}"
MGMT_API_PORT="${MGMT_API_PORT:-7710}"
MGMT_METRICS_PORT="${MGMT_METRICS_PORT:-9465}"
EDGE_P2P_BASE="${EDGE_P2P_BASE:-4000}"
EDGE_API_BASE="${EDGE_API_BASE:-7700}"
EDGE_METRICS_BASE="${EDGE_METRICS_BASE:-9400}"
READY_TIMEOUT="${READY_TIMEOUT:-60}"
STOP_TIMEOUT="${STOP_TIMEOUT:-30}"
LOG_FORMAT="${LOG_FORMAT:-text}"
ANOMALY_NEW_PEERS="${ANOMALY_NEW_PEERS:-20}"
ANOMALY_LISTINGS="${ANOMALY_LISTINGS:-30}"

say() { printf '[local-swarm] %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

command -v curl >/dev/null 2>&1 || die "curl is needed to wait for /healthz"

# --- binaries -------------------------------------------------------------------------------
has_bins() { [[ -x "$1/druse-node" && -x "$1/druse-mgmt" ]]; }
if [[ -n "${BIN_DIR:-}" ]]; then
  has_bins "$BIN_DIR" || die "BIN_DIR=$BIN_DIR has no executable druse-node and druse-mgmt"
elif has_bins "$ROOT/target/release"; then
  BIN_DIR="$ROOT/target/release"
elif has_bins "$ROOT/target/debug"; then
  BIN_DIR="$ROOT/target/debug"
  say "using the debug binaries in $BIN_DIR (build release ones with: cargo build --release)"
else
  say "no druse binaries yet; building them: cargo build --release --bins -p druse-node -p druse-management"
  (cd "$ROOT" && cargo build --release --bins -p druse-node -p druse-management)
  BIN_DIR="$ROOT/target/release"
fi
BIN_DIR="$(cd "$BIN_DIR" && pwd)"
NODE="$BIN_DIR/druse-node"
MGMT="$BIN_DIR/druse-mgmt"

# --- the swarm's directory, the management key and the trust list ---------------------------
if [[ -z "${SWARM_DIR:-}" ]]; then
  SWARM_DIR="$(mktemp -d "${TMPDIR:-/tmp}/druse-swarm.XXXXXX")"
fi
mkdir -p "$SWARM_DIR"
SWARM_DIR="$(cd "$SWARM_DIR" && pwd)"
mkdir -p "$SWARM_DIR/mgmt"

if [[ ! -f "$SWARM_DIR/mgmt/node.key" ]]; then
  "$MGMT" keygen --out "$SWARM_DIR/mgmt/node.key" >/dev/null
fi
# `druse-node id` prints `peer_id <PeerId>` and `public_key <hex>`.
ID_OUT="$("$NODE" id --data-dir "$SWARM_DIR/mgmt")"
MGMT_PEER_ID="$(awk '$1 == "peer_id" {print $2}' <<<"$ID_OUT")"
MGMT_PUBLIC_KEY="$(awk '$1 == "public_key" {print $2}' <<<"$ID_OUT")"
[[ -n "$MGMT_PEER_ID" && -n "$MGMT_PUBLIC_KEY" ]] || die "cannot read the management identity from: $ID_OUT"
TRUST_LIST="$SWARM_DIR/trust-list"
printf '# druse trust list for the local swarm\n%s  # mgmt\n' "$MGMT_PUBLIC_KEY" >"$TRUST_LIST"
BOOTSTRAP="/ip4/$SWARM_HOST/tcp/$MGMT_P2P_PORT/p2p/$MGMT_PEER_ID"
# The management node's config holds only the anomaly detector's thresholds (deploy/management.toml
# lists every key); the flags below set the rest.
MGMT_CONFIG="$SWARM_DIR/management.toml"
printf '# Written by deploy/local-swarm.sh.\n[management.anomaly]\nnew_peers = %d\nlistings_per_peer = %d\n' \
  "$ANOMALY_NEW_PEERS" "$ANOMALY_LISTINGS" >"$MGMT_CONFIG"

# --- starting and stopping -----------------------------------------------------------------
NAMES=()
PIDS=()

stop_all() {
  local code="${1:-0}"
  trap - INT TERM EXIT
  if ((${#PIDS[@]})); then
    say "stopping ${#PIDS[@]} node(s) with SIGTERM"
    local i
    for i in "${!PIDS[@]}"; do
      kill -TERM "${PIDS[$i]}" 2>/dev/null || true
    done
    local deadline=$((SECONDS + STOP_TIMEOUT))
    for i in "${!PIDS[@]}"; do
      while kill -0 "${PIDS[$i]}" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
      if kill -0 "${PIDS[$i]}" 2>/dev/null; then
        say "${NAMES[$i]} (pid ${PIDS[$i]}) did not stop in ${STOP_TIMEOUT}s; sending SIGKILL"
        kill -KILL "${PIDS[$i]}" 2>/dev/null || true
      fi
      local status=0
      wait "${PIDS[$i]}" 2>/dev/null || status=$?
      say "${NAMES[$i]} (pid ${PIDS[$i]}) exited with status $status"
    done
  fi
  say "data and logs are kept in $SWARM_DIR"
  exit "$code"
}
trap 'stop_all 130' INT
trap 'stop_all 143' TERM
trap 'stop_all $?' EXIT

# start NAME BINARY DATA_DIR P2P_PORT API_PORT METRICS_PORT [extra run flags…]
start() {
  local name="$1" bin="$2" data="$3" p2p="$4" api="$5" metrics="$6"
  shift 6
  mkdir -p "$data"
  "$bin" run \
    --data-dir "$data" \
    --trust-list "$TRUST_LIST" \
    --listen "/ip4/$SWARM_HOST/tcp/$p2p,/ip4/$SWARM_HOST/udp/$p2p/quic-v1" \
    --api-listen "$SWARM_HOST:$api" \
    --metrics-listen "$SWARM_HOST:$metrics" \
    --mdns false \
    --log-format "$LOG_FORMAT" \
    "$@" >"$SWARM_DIR/$name.log" 2>&1 &
  NAMES+=("$name")
  PIDS+=("$!")
  say "started $name (pid $!), log $SWARM_DIR/$name.log"
}

wait_healthy() {
  local name="$1" pid="$2" url="$3"
  local deadline=$((SECONDS + READY_TIMEOUT))
  until curl -fsS --max-time 2 "$url" >/dev/null 2>&1; do
    if ! kill -0 "$pid" 2>/dev/null; then
      say "$name exited before answering $url; the end of its log:"
      tail -n 30 "$SWARM_DIR/$name.log" >&2 || true
      return 1
    fi
    ((SECONDS < deadline)) || { say "$name did not answer $url within ${READY_TIMEOUT}s"; return 1; }
    sleep 0.3
  done
}

start mgmt "$MGMT" "$SWARM_DIR/mgmt" "$MGMT_P2P_PORT" "$MGMT_API_PORT" "$MGMT_METRICS_PORT" \
  --config "$MGMT_CONFIG"
wait_healthy mgmt "${PIDS[0]}" "http://$SWARM_HOST:$MGMT_API_PORT/healthz" || stop_all 1

for n in $(seq 1 "$EDGES"); do
  start "edge-$n" "$NODE" "$SWARM_DIR/edge-$n" $((EDGE_P2P_BASE + n)) $((EDGE_API_BASE + n)) \
    $((EDGE_METRICS_BASE + n)) --bootstrap "$BOOTSTRAP"
done
for n in $(seq 1 "$EDGES"); do
  wait_healthy "edge-$n" "${PIDS[$n]}" "http://$SWARM_HOST:$((EDGE_API_BASE + n))/healthz" || stop_all 1
done

# --- how to reach it -------------------------------------------------------------------------
E1_API="http://$SWARM_HOST:$((EDGE_API_BASE + 1))"
E2_API="http://$SWARM_HOST:$((EDGE_API_BASE + 2))"
M_API="http://$SWARM_HOST:$MGMT_API_PORT"
{
  echo
  echo "druse local swarm is up ($BIN_DIR)"
  echo "  swarm dir   $SWARM_DIR (trust list: $TRUST_LIST)"
  echo "  management  peer $MGMT_PEER_ID"
  printf '  %-8s  api %-24s metrics %-36s data %s\n' mgmt "$M_API" \
    "http://$SWARM_HOST:$MGMT_METRICS_PORT/metrics" "$SWARM_DIR/mgmt"
  for n in $(seq 1 "$EDGES"); do
    printf '  %-8s  api %-24s metrics %-36s data %s\n' "edge-$n" "http://$SWARM_HOST:$((EDGE_API_BASE + n))" \
      "http://$SWARM_HOST:$((EDGE_METRICS_BASE + n))/metrics" "$SWARM_DIR/edge-$n"
  done
  cat <<EOF

Try it (in another shell):
  B=$BIN_DIR
  \$B/druse-node status --api $E1_API
  CID=\$(\$B/druse-node skill publish --name retry-backoff --text "Retry failed calls with exponential backoff" \\
        --api $E1_API --data-dir $SWARM_DIR/edge-1)
  \$B/druse-node skill list --api $E2_API
  \$B/druse-mgmt endorse \$CID --note reviewed --api $M_API --data-dir $SWARM_DIR/mgmt
  \$B/druse-mgmt weather --level 0.9 --duration 5m --reason drill --api $M_API --data-dir $SWARM_DIR/mgmt
  \$B/druse-node weather --api $E2_API
  curl -s http://$SWARM_HOST:$((EDGE_METRICS_BASE + 2))/metrics | grep -E '^druse_(peers|halted|weather_cortisol)'
  \$B/druse-mgmt weather --level 0 --duration 1s --reason "all clear" --api $M_API --data-dir $SWARM_DIR/mgmt
  \$B/druse-mgmt census --api $M_API     # every peer with its trust and listings; the weather; the detector
EOF
  if ((ANOMALY_LISTINGS <= 10)); then
    cat <<EOF

The anomaly detector raises weather by itself when one peer offers $ANOMALY_LISTINGS listings within a minute:
  for i in \$(seq 1 $ANOMALY_LISTINGS); do \$B/druse-node skill publish --name burst-\$i --text "burst number \$i" \\
    --api $E1_API --data-dir $SWARM_DIR/edge-1; done
  \$B/druse-node weather --api $E2_API    # halted: "suspicious skill burst from peer cluster: peer ... offered ..."
  curl -s http://$SWARM_HOST:$MGMT_METRICS_PORT/metrics | grep '^druse_anomaly_weather_total'
EOF
  else
    echo
    echo "To watch the anomaly detector raise weather on a listing burst, start the swarm with ANOMALY_LISTINGS=5."
  fi
  cat <<EOF

Press Ctrl-C (or send SIGTERM to pid $$) to stop every node.
EOF
} >&2

# --- run until a signal or a node dies --------------------------------------------------------
while :; do
  for i in "${!PIDS[@]}"; do
    if ! kill -0 "${PIDS[$i]}" 2>/dev/null; then
      status=0
      wait "${PIDS[$i]}" 2>/dev/null || status=$?
      say "${NAMES[$i]} (pid ${PIDS[$i]}) exited on its own with status $status; the end of its log:"
      tail -n 30 "$SWARM_DIR/${NAMES[$i]}.log" >&2 || true
      unset 'PIDS[i]' 'NAMES[i]'
      stop_all 1
    fi
  done
  # `sleep` in the background and `wait` on it, so a signal is handled at once.
  sleep 1 &
  wait $! 2>/dev/null || true
done
