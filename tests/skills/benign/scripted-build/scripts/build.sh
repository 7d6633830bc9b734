#!/bin/sh
set -eu
cargo build --release
cargo test --release
