#!/usr/bin/env bash
# One device call of the runbook in benchmarks/README.md, on a 2-GPU H200 host (nvidia-h200-x2),
# each phase under 10 minutes: two independent jobs run side by side, one per GPU, so that a
# session's 30 minutes of device time buy twice the GPU work. Results go under $OUT.
#
#   bash benchmarks/h200_session.sh tables-a   # pack table (GPU 0) | logits table (GPU 1)
#   bash benchmarks/h200_session.sh tables-b   # decode table on both GPUs
#   bash benchmarks/h200_session.sh measure    # decode bench + breakdown | logits bench + GPU-only tests
#
# Tables carried in under benchmarks/tables/ are continued (--resume), not redone.
# Missing packages travel as wheels (`../shared/tools/gpu-wheels.sh`, carry `.whl`).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/results" "$OUT/tables"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit
fi
export PYTHONPATH=$PWD:/tmp/site KVTUNE_CACHE_DIR=/tmp/kvc PYTHONUNBUFFERED=1
# Carried-in tables (from an earlier call) let --resume continue where that call was cut.
cp -n benchmarks/tables/*.json "$OUT/tables/" 2>/dev/null || true
nvidia-smi --query-gpu=index,name,memory.used --format=csv,noheader
budget=${BUDGET_S:-540}   # the whole call, seconds
t0=$(date +%s)
left() { echo $((budget - ($(date +%s) - t0))); }

case "${1:-}" in
measure)
  (
    export CUDA_VISIBLE_DEVICES=0
    timeout $(( $(left) - 170 )) python3 benchmarks/bench_decode.py --budget-s $(( $(left) - 230 )) --out "$OUT/results" >"$OUT/bench_decode.log" 2>&1
    echo "bench_decode rc=$?" >>"$OUT/bench_decode.log"
    timeout $(( $(left) - 5 )) python3 benchmarks/decode_breakdown.py --cfg "" --cfg "LISTS=separate" --out "$OUT/results" >"$OUT/decode_breakdown.log" 2>&1
  ) &
  (
    export CUDA_VISIBLE_DEVICES=1
    timeout 400 python3 benchmarks/bench_logits.py --budget-s 300 --out "$OUT/results" >"$OUT/bench_logits.log" 2>&1
    echo "bench_logits rc=$?" >>"$OUT/bench_logits.log"
    # The tests that only run on a GPU (the whole suite compiles too much to fit here).
    timeout $(( $(left) - 5 )) python3 -m pytest -q tests/tuner -k "gpu_graph_timing or over_2gib" -p no:cacheprovider >"$OUT/pytest_gpu.log" 2>&1
    echo "pytest rc=$?" >>"$OUT/pytest_gpu.log"
  ) &
  wait
  ;;
tables-a)
  CUDA_VISIBLE_DEVICES=0 python3 benchmarks/record_table.py --kernel pack --time-limit $(( $(left) - 15 )) \
    --precompile-jobs 14 --out-dir "$OUT/tables" --resume >"$OUT/table_pack.log" 2>&1 &
  CUDA_VISIBLE_DEVICES=1 python3 benchmarks/record_table.py --kernel logits --time-limit $(( $(left) - 15 )) \
    --precompile-jobs 14 --out-dir "$OUT/tables" --resume >"$OUT/table_logits.log" 2>&1 &
  wait
  ;;
tables-b)
  python3 benchmarks/record_table.py --kernel decode --devices 0,1 --time-limit $(( $(left) - 15 )) \
    --precompile-jobs 28 --out-dir "$OUT/tables" --resume >"$OUT/table_decode.log" 2>&1
  ;;
*)
  echo "usage: $0 tables-a|tables-b|measure" >&2
  exit 2
  ;;
esac
echo "call took $(( $(date +%s) - t0 )) s"
tail -n 3 "$OUT"/*.log
# The device tool brings back at most 8 files: results and tables travel as one archive
# (here: tar xzf out.tgz, then copy tables/*.json into benchmarks/tables/).
tar czf "$OUT/out.tgz" -C "$OUT" results tables && rm -rf "$OUT/results" "$OUT/tables"
