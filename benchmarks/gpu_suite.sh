#!/usr/bin/env bash
# The tuner tests on a GPU machine, one pytest process per file (test_logits.py in three parts)
# in parallel: one after another they exceed a 10-minute device call, since on a GPU every
# variant compiles. Logs and a summary go under $OUT (default /tmp/out).
#   bash benchmarks/gpu_suite.sh            # on the H200 (the device tool's call)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
LIMIT=${LIMIT_S:-520}
mkdir -p "$OUT/suite"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit
fi
export PYTHONPATH=$PWD:/tmp/site KVTUNE_CACHE_DIR=/tmp/kvc PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
run() {  # name, pytest args...
  local name=$1; shift
  timeout "$LIMIT" python3 -m pytest -q -rfEs -p no:cacheprovider "$@" >"$OUT/suite/$name.log" 2>&1
  echo "rc=$?" >>"$OUT/suite/$name.log"
}
for f in tests/tuner/test_*.py; do
  base=$(basename "$f" .py)
  case "$base" in
  test_logits)
    run logits_query "$f" -k "query" &
    run logits_reference "$f" -k "not query and (matches_reference or key_scaled)" &
    run logits_rest "$f" -k "not query and not matches_reference and not key_scaled" & ;;
  *) run "${base#test_}" "$f" & ;;
  esac
done
wait
for l in "$OUT"/suite/*.log; do
  printf '%-22s %s | %s\n' "$(basename "$l" .log)" "$(grep -E '^[0-9]+ (passed|failed)|passed|failed|error' "$l" | tail -n 1)" "$(tail -n 1 "$l")"
done | tee "$OUT/suite_summary.txt"
