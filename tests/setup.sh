#!/usr/bin/env bash
# Installs what the test suite needs beyond a Rust toolchain, idempotently (a second run only
# checks): the js-libp2p peer of the interop test (npm packages from tests/js's lock file) and
# the local ATProto network of the agent scenarios (Debian's PostgreSQL, Node 22 and
# @atproto/dev-env), and headless Chromium for the /memory page test (tests/page/setup.sh).
# Needs node, npm and, for PostgreSQL and Chromium, apt-get as root.
#
#   bash tests/setup.sh && cargo test --workspace --release
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bash "$here/js/setup.sh"
bash "$here/atproto/install.sh" >/dev/null
bash "$here/page/setup.sh"
# The official Python MCP SDK (a venv) that the MCP tests use as their client.
bash "$here/mcp/setup.sh"
echo "tests/setup.sh: the js peer, the ATProto network, Chromium and the MCP SDK are installed"
