#!/usr/bin/env bash
# Installs headless Chromium (Debian's `chromium`) for the /memory page test
# (tests/tests/memory_page.rs). Idempotent: returns at once when /usr/bin/chromium exists.
# Needs apt-get as root.
set -euo pipefail

if [ -x /usr/bin/chromium ]; then
  echo "tests/page: chromium already installed ($(/usr/bin/chromium --version 2>/dev/null || echo 'version unknown'))"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "tests/page/setup.sh: apt-get is missing; install Debian's chromium package by hand" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
echo "tests/page: chromium installed ($(/usr/bin/chromium --version 2>/dev/null || echo 'version unknown'))"
