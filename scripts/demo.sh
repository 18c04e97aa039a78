#!/usr/bin/env bash
# Set up a virtual environment and run the main job on the local GPU (Triton's interpreter when
# there is none). The README's main command.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q torch==2.13.0 -e '.[tuner]'
exec .venv/bin/kvtune demo "$@"
