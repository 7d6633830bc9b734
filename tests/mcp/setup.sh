#!/usr/bin/env bash
# Installs the official Python MCP SDK (PyPI `mcp`, pinned) into a venv the MCP tests use as
# their client: ${DRUSE_MCP_VENV:-~/.cache/druse/mcp-venv}. Idempotent: returns at once when
# the venv already holds the pinned version. Fails loudly when python3 or its venv module is
# missing.
set -euo pipefail
# shellcheck source=../venv.sh
source "$(dirname "$0")/../venv.sh"

version="2.3.0"
venv="${DRUSE_MCP_VENV:-$HOME/.cache/druse/mcp-venv}"

if ! command -v python3 >/dev/null 2>&1; then
  echo "tests/mcp/setup.sh: python3 is not installed; the MCP tests need Python >= 3.10" >&2
  exit 1
fi
if ! python3 -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)'; then
  echo "tests/mcp/setup.sh: $(python3 --version) is too old; the MCP SDK needs Python >= 3.10" >&2
  exit 1
fi

installed() {
  "$venv/bin/python" -c 'import importlib.metadata as m, sys; sys.exit(0 if m.version("mcp") == sys.argv[1] else 1)' \
    "$version" 2>/dev/null
}

if [ -x "$venv/bin/python" ] && installed; then
  echo "tests/mcp: mcp==$version already installed in $venv"
  exit 0
fi
make_venv "$venv" tests/mcp/setup.sh
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "mcp==$version"
installed || { echo "tests/mcp/setup.sh: mcp==$version did not install into $venv" >&2; exit 1; }
echo "tests/mcp: mcp==$version installed in $venv"
