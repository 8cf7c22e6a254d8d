#!/usr/bin/env bash
# Create .venv with the course and its tools. torch is installed first, pinned, so that
# pip takes the CPU build instead of resolving a multi-GB CUDA build; the package itself
# only asks for a range.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q "torch==${TORCH_VERSION:-2.13.0}"
.venv/bin/python -m pip install -q -e ".[test]"
