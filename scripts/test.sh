#!/usr/bin/env bash
# Set up a virtual environment and run the whole test suite (no GPU needed: Triton's interpreter
# and cross-compilation stand in for it). The README's test command; .ci/run calls it.
set -euo pipefail
cd "$(dirname "$0")/.."
phase() { printf '\n== kvtune tests: %s\n' "$*"; }

if ! command -v chromium >/dev/null; then
  # The dashboard tests drive a real headless browser: Debian's package, never a browser download.
  phase "installing Debian's chromium for the dashboard tests (apt-get, needs root; ~1-2 min)"
  apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi

phase "virtual environment .venv/ with torch==2.13.0 (the CPU build), triton 3.6.0 and kvtune[tuner,test] (~1-3 min)"
python3 -m venv .venv
.venv/bin/python -m pip install -qq --disable-pip-version-check --upgrade pip
# torch==2.13.0 named first takes the CPU build on this machine's disk instead of a CUDA download.
# -qq and no Python warnings: errors still show, but not a machine's pip configuration naming index
# folders it lacks (a warning a package) nor setuptools' note on editable installs.
PYTHONWARNINGS=ignore .venv/bin/python -m pip install -qq --disable-pip-version-check torch==2.13.0 -e '.[tuner,test]'

phase "pytest: the whole suite on 2 workers (interpreter kernels, cross-compile tables, real uvicorn, PostgreSQL, Chromium)"
# Two pytest-xdist workers, one a core of the 2-core CI machine; work stealing evens out the long
# tests (cross-compile tables, interpreter prefill). Arguments given here come after, so `-n 0`
# runs it in one process.
exec .venv/bin/python -m pytest -q -n 2 --dist worksteal --durations=15 "$@"
