#!/usr/bin/env bash
# Runs the commands of the README's "Set up on a fresh machine" section as they are written
# there, so a README that drifts from the code fails CI.
#
#   bash .ci/readme.sh tests   # the test command, as written
#   bash .ci/readme.sh node    # the edge node's command, as written: started, its API waited
#                              # for (READY_TIMEOUT seconds, 300 by default), then stopped
#
# The section's ```sh blocks are read from README.md: the one line that runs a node
# (`cargo run … -- run`) and the one that runs the tests (`cargo test`). Either missing is an
# error that says which.
set -euo pipefail
cd "$(dirname "$0")/.."

commands() {
  awk '/^## Set up on a fresh machine/ { on = 1; next } /^## / { on = 0 } on' README.md |
    awk '/^```sh/ { block = 1; next } /^```/ { block = 0; next } block && NF'
}

one() {
  local what="$1" pattern="$2" found
  found="$(commands | grep -E "$pattern" || true)"
  if [ "$(printf '%s' "$found" | grep -c .)" -ne 1 ]; then
    echo "README.md \"Set up on a fresh machine\": expected one command that $what, found:" >&2
    printf '%s\n' "${found:-(none)}" >&2
    exit 1
  fi
  printf '%s\n' "$found"
}

case "${1:-}" in
  tests)
    cmd="$(one "runs the tests" 'cargo test')"
    echo "README: $cmd"
    bash -c "$cmd"
    ;;
  node)
    cmd="$(one "runs an edge node" '^cargo run .*-- run$')"
    if [ -e ./druse-data ]; then
      echo "./druse-data exists: the node command would use it; move it away to run this check" >&2
      exit 1
    fi
    api="http://127.0.0.1:7700"
    wait_s="${READY_TIMEOUT:-300}"
    log="$(mktemp)"
    echo "README: $cmd (waiting up to ${wait_s}s for $api/healthz)"
    # Its own process group, so stopping it stops cargo and the node it started.
    setsid bash -c "$cmd" >"$log" 2>&1 &
    leader=$!
    stop() {
      kill -TERM -- "-$leader" 2>/dev/null || true
      for _ in $(seq 1 50); do kill -0 -- "-$leader" 2>/dev/null || break; sleep 0.2; done
      kill -KILL -- "-$leader" 2>/dev/null || true
      rm -f "$log"
    }
    trap stop EXIT
    ready=""
    for _ in $(seq 1 "$wait_s"); do
      if curl -sf "$api/healthz" >/dev/null 2>&1; then ready=1; break; fi
      if ! kill -0 "$leader" 2>/dev/null; then break; fi
      sleep 1
    done
    if [ -z "$ready" ]; then
      echo "the README's node command did not answer on $api/healthz; its output:" >&2
      tail -40 "$log" >&2
      exit 1
    fi
    curl -sf "$api/v1/status" >/dev/null || { echo "$api/v1/status did not answer" >&2; tail -40 "$log" >&2; exit 1; }
    echo "the node answers on $api (status and healthz)"
    # The data directory the command made (./druse-data, ignored by git) goes with it.
    stop
    trap - EXIT
    rm -rf ./druse-data
    ;;
  *)
    echo "usage: bash .ci/readme.sh tests|node" >&2
    exit 2
    ;;
esac
