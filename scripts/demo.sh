#!/usr/bin/env bash
# Set up a virtual environment and run the main job on the local GPU (Triton's interpreter when
# there is none). The README's main command.
set -euo pipefail
cd "$(dirname "$0")/.."
phase() { printf '== kvtune demo: %s\n' "$*"; }

phase "virtual environment .venv/ with torch==2.13.0 (the CPU build), triton 3.6.0 and kvtune[tuner] (~1 min)"
python3 -m venv .venv
.venv/bin/python -m pip install -qq --disable-pip-version-check --upgrade pip
# torch==2.13.0 named first takes the CPU build on this machine's disk instead of a CUDA download.
# -qq and no Python warnings: errors still show, but not a machine's pip configuration naming index
# folders it lacks (a warning a package) nor setuptools' note on editable installs.
PYTHONWARNINGS=ignore .venv/bin/python -m pip install -qq --disable-pip-version-check torch==2.13.0 -e '.[tuner]'
exec .venv/bin/kvtune demo "$@"
