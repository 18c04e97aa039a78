#!/usr/bin/env bash
# Set up a virtual environment and run the whole test suite (no GPU needed: Triton's interpreter
# and cross-compilation stand in for it). The README's test command.
set -euo pipefail
cd "$(dirname "$0")/.."
# The dashboard tests drive Debian's headless Chromium (CI runs as root; no browser download).
command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# torch==2.13.0 named first takes the CPU build on this machine's disk instead of a CUDA download.
.venv/bin/python -m pip install -q torch==2.13.0 -e '.[tuner,test]'
exec .venv/bin/python -m pytest -q --durations=15 "$@"
