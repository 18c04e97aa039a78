#!/usr/bin/env bash
# Nsight Compute profiles of the decode wgmma path's builds at T=64 (the fp8_584 pair, or PAIR), one launch
# each (H200): the summary sections and the per-SASS-line stall samples (CSV, for
# benchmarks/ncu_stalls.py). Each profile ~20-40 s. Results under $OUT/ncu/.
#
#   bash benchmarks/ncu_wgmma_profiles.sh                 # the three builds below
#   CASES="64:0:16:wgmma:4" bash benchmarks/ncu_wgmma_profiles.sh   # T:splits:heads:build:warps[:PREFETCH]
#   SOURCE_ONLY=1 CASES="64:0:128:wgmma_hmpv:4:1" bash ...   # the per-SASS-line stall samples alone
#   PAIR=nvfp4_288,fp8_528 CASES="64:2:16:wgmma_ws:4:0" bash ... # another record pair (the seed shape's ws pick)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/ncu"
NCU=${NCU:-/usr/local/cuda/bin/ncu}
for c in ${CASES:-64:0:16:wgmma:4 64:0:64:wgmma:8 64:0:128:wgmma_hm:8}; do
  IFS=: read -r t s h mma w pf <<<"$c"
  name="T${t}_H${h}_${mma}_w${w}${pf:+_pf$pf}${PAIR:+_${PAIR//,/_}}"
  drive=(python3 benchmarks/ncu_decode_wgmma_drive.py "$t" "$s" "${PAIR:-fp8_584,fp8_584}" "$h" "$mma" "$w" "${pf:-0}")
  [ -n "${SOURCE_ONLY:-}" ] || timeout 120 "$NCU" --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
    --section LaunchStats --section ComputeWorkloadAnalysis --section InstructionStats \
    --metrics "regex:smsp__average_warp_latency_issue_stalled_.*\.ratio" \
    -k regex:decode_wgmma -s 2 -c 1 "${drive[@]}" >"$OUT/ncu/$name.txt" 2>&1
  timeout 120 "$NCU" --section SourceCounters -k regex:decode_wgmma -s 2 -c 1 -f -o "/tmp/$name" "${drive[@]}" \
    >/dev/null 2>&1 && "$NCU" -i "/tmp/$name.ncu-rep" --page source --csv --print-source sass >"$OUT/ncu/$name.sass.csv" 2>&1
  echo "$name: $(grep -E 'Duration|Registers Per|Warp Cycles Per Issued' "$OUT/ncu/$name.txt" | tr -s ' ' | tr '\n' ';')"
done
