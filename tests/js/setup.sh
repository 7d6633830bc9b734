#!/usr/bin/env bash
# Installs the js-libp2p peer's npm packages (tests/js/node_modules) exactly as
# package-lock.json pins them. Idempotent: returns at once when the installed tree
# matches the lock file. Fails loudly when node or npm is missing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"

for tool in node npm; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "tests/js/setup.sh: $tool is not installed; the interop test needs Node.js >= 20 and npm" >&2
    exit 1
  fi
done
major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$major" -lt 20 ]; then
  echo "tests/js/setup.sh: Node.js $(node --version) is too old; the interop test needs >= 20" >&2
  exit 1
fi

stamp=node_modules/.druse-lock.sha256
want=$(sha256sum package-lock.json | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "tests/js: npm packages already installed"
  exit 0
fi
npm ci --no-audit --no-fund --loglevel=error
echo "$want" > "$stamp"
echo "tests/js: npm packages installed"
