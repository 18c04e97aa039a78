#!/usr/bin/env bash
# Device calls of the runbook in benchmarks/README.md, on one H200 (nvidia-h200), each under 10
# minutes. Phases run in the order given and share the call's budget (BUDGET_S, default 540 s);
# results go under $OUT.
#
#   bash benchmarks/h200_session.sh tables           # pack, logits, decode tables (--resume)
#   REQUIRE_CARD=H200 bash benchmarks/h200_session.sh pack-onerun   # exit 3 at once on any other card
#   TABLES_S=300 bash benchmarks/h200_session.sh tables logits   # finish them, then the logits bench
#   bash benchmarks/h200_session.sh merge-tests merge-share   # COMBINE=fused's GPU tests; what the split merge costs,
#                                                    # and the picks with it merged in the kernel, at small T
#   bash benchmarks/h200_session.sh combine-sweep    # decode_combine alone, by (T, heads, partials) and tile
#   bash benchmarks/h200_session.sh decode           # decode bench (checks at T=1..64, then sweeps)
#   bash benchmarks/h200_session.sh ws               # the warp-specialised decode build: GPU tests, both pairs timed
#   bash benchmarks/h200_session.sh wgmma-rate       # cycles a wgmma at the decode tile's shapes (A from shared
#                                                    # memory or registers, N 8-256, one or two programs an SM; ~1 min)
#   bash benchmarks/h200_session.sh wsr              # its register-producer form (MMA=wgmma_wsr) beside it: timings,
#                                                    # its GPU test, both timelines at 16 heads T=64
#   bash benchmarks/h200_session.sh heads-on-m       # the heads-on-M builds (plain and warp-specialised): the same
#   bash benchmarks/h200_session.sh prefetch-tests   # GPU tests of the QK / PV split and the PREFETCH=1 builds
#   bash benchmarks/h200_session.sh prefetch         # their timings beside the builds without it
#   bash benchmarks/h200_session.sh timeline         # what binds the wgmma builds, from inside (decode_timeline.py)
#   bash benchmarks/h200_session.sh share            # MMA=wgmma_hmpvs / wgmma_wss (tiles shared by head groups): GPU tests, timings
#   bash benchmarks/h200_session.sh resident         # the 128-head picks with records in L2 (as FlashMLA's 128-head figures)
#   AB_PATCH=NAME.patch bash benchmarks/h200_session.sh ab-cluster      # a cluster-build patch A/B'd (one a call)
#   AB_PATCH=NAME.patch bash benchmarks/h200_session.sh ab-decode       # a decode-build patch A/B'd (the 128-head split)
#   AB_PATCH=NAME.patch bash benchmarks/h200_session.sh ab-logits       # a logits wgmma patch A/B'd (mxfp4_68, B=64)
#   bash benchmarks/h200_session.sh ncu-producer     # the heads-on-M producer's stalls, per SASS line (Nsight Compute)
#   DECODE_S=300 bash benchmarks/h200_session.sh decode logits   # both benches in one call
#   (LOGITS_S and DECODE_S cap a phase that is not the last)
#
# Tables carried in under benchmarks/tables/ are continued, not redone. record_table compiles each
# kernel's entries ahead on the CPU while the kernel before is timed, into Triton's cache, which a
# later call on the still-warm machine finds again.
# Missing packages travel as wheels (`../shared/tools/gpu-wheels.sh`, carry `.whl`).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT/results" "$OUT/tables"
# REQUIRE_CARD=H200: a call the tool ran on another card (it may give an H100 for nvidia-h200) stops here, exit 3,
# before installing or compiling anything (an issue's record must be the H200's).
if [ -n "${REQUIRE_CARD:-}" ] && ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q "$REQUIRE_CARD"; then
  echo "not a $REQUIRE_CARD: nothing run"; exit 3
fi
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit
fi
export PYTHONPATH=$PWD:/tmp/site KVTUNE_CACHE_DIR=/tmp/kvc PYTHONUNBUFFERED=1
# Carried-in tables (from an earlier call) let --resume continue where that call was cut.
cp -n benchmarks/tables/*.json "$OUT/tables/" 2>/dev/null || true
nvidia-smi --query-gpu=index,name,memory.used --format=csv,noheader
# GPU test phases compile dozens of kernels a test: on the machine's 16 cores with pytest-xdist (fetch it
# with `gpu-wheels.sh pytest-xdist execnet`) they run PYTEST_N at a time.
XDIST=$(python3 -c "import xdist" 2>/dev/null && echo "-n ${PYTEST_N:-6}")
budget=${BUDGET_S:-540}   # the whole call, seconds
t0=$(date +%s)
left() { echo $((budget - ($(date +%s) - t0))); }

# ptxas13: a newer ptxas carried in as .ptxas/ptxas-VERSION.gz (Triton 3.6 ships 12.8, whose C7518 serializes the
# wgmmas of a warp-specialised cluster build), unpacked once; prints its path, fails when none was carried.
ptxas13() {
  local gz; gz=$(ls .ptxas/ptxas-*.gz 2>/dev/null | tail -1) && [ -n "$gz" ] || return 1
  [ -x /tmp/ptxas13 ] || { gunzip -c "$gz" >/tmp/ptxas13 && chmod +x /tmp/ptxas13; } || return 1
  echo /tmp/ptxas13
}

# PTXAS13=1: every phase compiles with it (TRITON_PTXAS_PATH; its own Triton cache dirs).
if [ -n "${PTXAS13:-}" ]; then
  p13=$(ptxas13) || { echo "PTXAS13=1 but no .ptxas/ptxas-*.gz carried in"; exit 1; }
  export TRITON_PTXAS_PATH=$p13 KVTUNE_CACHE_DIR=/tmp/kvc13
fi

# ab_patch PATCH: this tree archived as ab.sh's base (/tmp/ab_base.tgz), then benchmarks/patches/PATCH applied to the
# device's copy (it stays patched: an A/B phase takes a call of its own); stops the call when it does not apply.
ab_patch() {
  tar czf /tmp/ab_base.tgz --exclude=./.whl --exclude=./.git . || exit
  apply_patch "$1"
}

# apply_patch PATCH: benchmarks/patches/PATCH applied to the device's copy; stops the call when it does not apply.
apply_patch() {
  { git apply "benchmarks/patches/$1" || patch -p1 --forward <"benchmarks/patches/$1"; } ||
    { echo "$phase: $1 does not apply; nothing run"; exit 1; }
}

PHASES="tables|wgmma-rate|wsr|merge-tests|merge-share|combine-sweep|cluster|ab-cluster|ab-decode|ab-logits|timeline-cluster|pack|pack-584|pack-onerun|pack-tests|pack-e2m1|patch|pack-tune|heads-table|share|resident|cluster-probe|heads-on-m|prefetch-tests|prefetch|timeline|ncu-producer|ws|logits|decode|decode-heads|tune|breakdown|logits-breakdown|logits-tests|wgmma-tests|decode-wgmma-tests|gpu-tests"
[ $# -gt 0 ] || { echo "usage: $0 $PHASES ..." >&2; exit 2; }
for phase in "$@"; do
  echo "== $phase ($(left) s left)"
  case "$phase" in
  tables)
    timeout -k 5 $(( $(left) - 8 )) python3 benchmarks/record_table.py --kernel pack --kernel logits --kernel decode \
      --time-limit "${TABLES_S:-$(( $(left) - 15 ))}" --precompile-jobs 14 --out-dir "$OUT/tables" --resume \
      >>"$OUT/tables.log" 2>&1
    echo "record_table rc=$?" >>"$OUT/tables.log"
    ;;
  wgmma-rate)  # what one wgmma costs at the decode tile's shapes (benchmarks/wgmma_rate_probe.py), its MMAs checked
    timeout $(( $(left) - 5 )) python3 benchmarks/wgmma_rate_probe.py --out "$OUT/results" >"$OUT/wgmma_rate.log" 2>&1
    echo "wgmma_rate_probe rc=$?" >>"$OUT/wgmma_rate.log"
    timeout $(( $(left) - 5 )) python3 -m pytest -q tests/tuner/test_wgmma_rate_probe.py -p no:cacheprovider -rA \
      >>"$OUT/wgmma_rate.log" 2>&1
    ;;
  logits)
    l_s=${LOGITS_S:-$(( $(left) - 10 ))}
    timeout $l_s python3 benchmarks/bench_logits.py --budget-s $(( l_s - 60 )) --formats "${LOGITS_FORMATS:-mxfp4_68,fp8_132}" \
      --out "$OUT/results" \
      >"$OUT/bench_logits.log" 2>&1
    echo "bench_logits rc=$?" >>"$OUT/bench_logits.log"
    ;;
  pack)  # byte-exactness of every legal backend (cvt included) and the config sweep, 1M tokens
    timeout $(( ${PACK_S:-$(( $(left) - 10 ))} )) python3 benchmarks/bench_pack.py --out "$OUT/results" \
      --max-configs-other "${PACK_CONFIGS:-16}" \
      >"$OUT/bench_pack.log" 2>&1
    echo "bench_pack rc=$?" >>"$OUT/bench_pack.log"
    ;;
  pack-584)  # issue 26's 1.5x line for fp8_584: its default beside the pipelined programs holding whole rows
    # (the bf16 dims copied a block ahead since 2026-12-05), byte-exact on 1M tokens first, one run
    timeout $(( ${PACK_S:-$(( $(left) - 10 ))} )) python3 benchmarks/bench_pack.py --out "$OUT/results" --formats fp8_584 \
      --pick backend=cvt,BLOCK_T=4,TILES_PER_PROG=8,BLOCKS_PER_PROG=8,num_stages=2 \
      --pick backend=cvt,BLOCK_T=8,TILES_PER_PROG=8,BLOCKS_PER_PROG=8,num_stages=2 \
      --pick backend=cvt,BLOCK_T=2,TILES_PER_PROG=8,BLOCKS_PER_PROG=8,num_stages=2 \
      >"$OUT/bench_pack_584.log" 2>&1
    echo "bench_pack rc=$?" >>"$OUT/bench_pack_584.log"
    ;;
  pack-onerun)  # issue 26's pack line, one run: every format at its best measured configs beside its default, 1M tokens
    # (pack_h200_onerun.md's picks; the e2m1 formats' with swar and with bf16x2, whose H200 timing was owed on
    # 2026-12-06: the faster is the line), byte-exact first; a directory a format; picks split by ';'
    for fp in "nvfp4_288 backend=swar,BLOCK_T=4,TILES_PER_PROG=32;backend=swar,BLOCK_T=8,TILES_PER_PROG=32;backend=bf16x2,BLOCK_T=4,TILES_PER_PROG=32;backend=bf16x2,BLOCK_T=8,TILES_PER_PROG=32" \
      "fp8_528 backend=cvt,BLOCK_T=8,TILES_PER_PROG=8" "fp8_584 backend=cvt,BLOCK_T=4,TILES_PER_PROG=8,BLOCKS_PER_PROG=8,num_stages=2" \
      "mxfp4_68 backend=swar,BLOCK_T=16,TILES_PER_PROG=4;backend=bf16x2,BLOCK_T=16,TILES_PER_PROG=4;backend=bf16x2,BLOCK_T=16,TILES_PER_PROG=4,num_warps=2" \
      "fp8_132 backend=cvt,BLOCK_T=16,TILES_PER_PROG=1"; do
      read -r f picks <<<"$fp"
      pargs=(); IFS=';' read -ra ps <<<"$picks"; for p in "${ps[@]}"; do pargs+=(--pick "$p"); done
      timeout $(( $(left) - 10 )) python3 benchmarks/bench_pack.py --out "$OUT/results/onerun_$f" --formats "$f" "${pargs[@]}" \
        >>"$OUT/bench_pack_onerun.log" 2>&1
      echo "bench_pack $f rc=$?" >>"$OUT/bench_pack_onerun.log"
    done
    ;;
  pack-tests)  # the pack tests on the GPU: every legal backend byte-exact, every e4m3 code and tie, every bf16 value
    # at the e2m1 formats' extreme scales, the query quantiser
    log="$OUT/results/pytest_pack${PATCHED:+_$PATCHED}_gpu_h200.log"
    timeout $(( $(left) - 5 )) python3 -m pytest -q $XDIST tests/tuner/test_pack.py -p no:cacheprovider \
      -k "matches_reference or every_code_and_tie or every_bf16_value" >"$log" 2>&1
    echo "pytest rc=$?" >>"$log"
    ;;
  patch)  # apply benchmarks/patches/$AB_PATCH to the device's copy for the phases after it, whose pack-tests and
    # pack-e2m1 results then carry its name (e.g. `pack-e2m1 patch pack-tests pack-e2m1`: base, then patched)
    apply_patch "${AB_PATCH:?patch: name it (AB_PATCH=NAME.patch)}"
    PATCHED=${AB_PATCH%.patch}
    ;;
  pack-e2m1)  # the e2m1 formats' writers side by side, 1M tokens: swar against bf16x2 (sm_90's packed bf16
    # compares and FMAs, 2026-12-06) at the measured tiles, plain and pipelined (results/pack_e2m1/{nvfp4_288,mxfp4_68})
    S="backend=swar"; B="backend=bf16x2"; P="BLOCKS_PER_PROG=8,num_stages=2"
    timeout $(( $(left) * 2 / 3 )) python3 benchmarks/bench_pack.py --out "$OUT/results/pack_e2m1${PATCHED:+_$PATCHED}/nvfp4_288" \
      --formats nvfp4_288 --pick "$S" --pick "$S,BLOCK_T=8" --pick "$B" --pick "$B,BLOCK_T=8" \
      --pick "$B,BLOCK_T=8,num_warps=4" --pick "$B,BLOCK_T=16,num_warps=4" --pick "$B,$P" --pick "$B,BLOCK_T=2,num_warps=1,$P" \
      --pick "$S,$P" >>"$OUT/bench_pack_e2m1.log" 2>&1
    echo "bench_pack nvfp4_288 rc=$?" >>"$OUT/bench_pack_e2m1.log"
    timeout $(( $(left) - 5 )) python3 benchmarks/bench_pack.py --out "$OUT/results/pack_e2m1${PATCHED:+_$PATCHED}/mxfp4_68" \
      --formats mxfp4_68 --pick "$S,BLOCK_T=16" --pick "$B,BLOCK_T=16" --pick "$B,BLOCK_T=8" --pick "$B,BLOCK_T=16,num_warps=2" \
      --pick "$B,BLOCK_T=32,num_warps=2" --pick "$B,BLOCK_T=16,$P" --pick "$S,BLOCK_T=16,$P" >>"$OUT/bench_pack_e2m1.log" 2>&1
    echo "bench_pack mxfp4_68 rc=$?" >>"$OUT/bench_pack_e2m1.log"
    ;;
  pack-tune)  # issue 26: kvtune tune per record format on the 1M-token bucket (the new backends found?)
    fmts=(${PACK_TUNE_FORMATS:-fp8_528 fp8_584 fp8_132 mxfp4_68 nvfp4_288})
    for i in "${!fmts[@]}"; do
      f=${fmts[$i]}; share=$(( ($(left) - 10) / (${#fmts[@]} - i) ))
      timeout $share python3 -m kvtune.cli tune --kernel pack --arch auto --formats "$f" --buckets 16385-1048576 \
        --trials "${PACK_TRIALS:-24}" --time-budget $(( share - 15 )) --out "$OUT/results/tune_pack_${f}_h200.json" \
        >"$OUT/tune_pack_$f.log" 2>&1
      echo "tune $f rc=$?" >>"$OUT/tune_pack_$f.log"
    done
    ;;
  heads-table)  # issue 28's table: H = 16, 32, 64, 128 (HEADS overrides) at T = 1, 8, 64, both pairs, from DRAM
    # (a call of its own: ~130 s an H; at ~75 s an H, 2026-12-06, most picks went untimed):
    # the default, the wgmma path with one and two warpgroups, heads on M and warp-specialised
    # (every pair since 2026-12-04), and the Triton tile's measured winners
    hs=(${HEADS:-16 32 64 128})
    for i in "${!hs[@]}"; do
      h=${hs[$i]}; share=$(( ($(left) - 5) / (${#hs[@]} - i) ))
      timeout $share python3 benchmarks/bench_decode.py --heads "$h" --ts 1,8,64 --skip-checks --budget-s $(( share - 30 )) \
        --pick "MMA=wgmma" --pick "MMA=wgmma,num_warps=8" --pick "MMA=wgmma,num_warps=8,NUM_SPLITS=1" \
        --pick "MMA=wgmma_hm" --pick "MMA=wgmma_hm,NUM_SPLITS=2" --pick "MMA=wgmma_ws" --pick "MMA=wgmma_ws,NUM_SPLITS=1" \
        --pick "MMA=wgmma_hmws" --pick "MMA=wgmma_hmpv" --pick "MMA=wgmma_ws,PREFETCH=1" \
        --pick "MMA=wgmma_hmws,PREFETCH=1" --pick "MMA=wgmma_hmpv,PREFETCH=1" \
        --pick "PREFETCH=1" --pick "LISTS=apart,PREFETCH=1" --pick "BLOCK_N=64,PREFETCH=1" --pick "num_warps=4,PREFETCH=1" \
        --name "decode_heads_h$h" --out "$OUT/results" >"$OUT/heads_h$h.log" 2>&1
      echo "bench_decode H=$h rc=$?" >>"$OUT/heads_h$h.log"
    done
    ;;
  share)  # the builds converting each tile once for all head groups (MMA=wgmma_hmpvs, wgmma_wss; 2026-12-05, compiled
    # on the CPU only: never run): their GPU tests first (bit for bit their base builds' outputs at two head groups
    # and more, three launches each, CUDA-graph replays; a hang in a spin-wait ends at the timeout), then both of
    # issue 28's pairs at 128 heads (HEADS), T = 64, 8, 1, beside the builds they share the tiles of
    timeout $(( $(left) / 2 )) python3 -m pytest -q $XDIST tests/tuner/test_decode_wgmma.py -k "shared_tile" -p no:cacheprovider \
      -rA >"$OUT/results/pytest_decode_shared_tiles_gpu_h200.log" 2>&1
    echo "pytest rc=$?" >>"$OUT/results/pytest_decode_shared_tiles_gpu_h200.log"
    hargs=(); for h in ${HEADS:-128}; do hargs+=(--heads "$h"); done
    timeout $(( $(left) - 5 )) python3 benchmarks/bench_decode_hm.py "${hargs[@]}" --ts 64,8,1 \
      --pair fp8_584+fp8_584 --pair nvfp4_288+fp8_528 --only "QK/PV split, splits auto, L2 prefetch" \
      --only "warp-specialised, splits auto" --only "shared tiles" --out "$OUT/results" >"$OUT/bench_decode_shared.log" 2>&1
    echo "bench_decode_hm rc=$?" >>"$OUT/bench_decode_shared.log"
    ;;
  resident)  # issue 28's FlashMLA figures at 128 heads were taken with the records in L2: kvtune's picks at 128 heads
    # (HEADS) the same way (one input set, launched again and again), T = 1, 8, 64, the fp8_584 pair, for a like-for-like
    # reading beside the table's DRAM timings (results/resident/decode_hm_h200.{md,json}; heads_table.py adds it to
    # issue 28's table once copied into benchmarks/results/resident/)
    hargs=(); for h in ${HEADS:-128}; do hargs+=(--heads "$h"); done
    timeout $(( $(left) - 5 )) python3 benchmarks/bench_decode_hm.py "${hargs[@]}" --ts 64,8,1 --pair fp8_584+fp8_584 \
      --records l2 --only "wgmma 1 warpgroup, splits auto" --only "warp-specialised, splits auto" \
      --only "QK/PV split, splits auto, L2 prefetch" --only "QK/PV split, shared tiles, splits auto, L2 prefetch" \
      --out "$OUT/results/resident" >"$OUT/bench_decode_resident.log" 2>&1
    echo "bench_decode_hm rc=$?" >>"$OUT/bench_decode_resident.log"
    ;;
  ab-cluster)  # A/B in one call (a call of its own: the copy stays patched): the cluster build (MMA=wgmma_hmpvc)
    # with benchmarks/patches/$AB_PATCH, ptxas 13.5 carried in; 128 heads, both pairs, T = 64, 8, 1, beside the
    # split; then the cluster build's GPU test on the patched tree (bit for bit the split's; AB_K: pytest -k of other
    # tests of test_decode_wgmma.py to run there too, e.g. "cluster_build_matches or (heads_on_m_matches and hmpv)" for a
    # patch of the split itself). (Its first patch, the remote pfree arrival before the tile's loads, landed
    # 2026-12-06: results/cluster/README.md.)
    p13=$(ptxas13) || { echo "ab-cluster: no .ptxas/ptxas-*.gz carried in: not run"; continue; }
    abp=${AB_PATCH:?ab-cluster: name the patch (AB_PATCH=NAME.patch)}
    ab_patch "$abp"
    env TRITON_PTXAS_PATH=$p13 BASE_TGZ=/tmp/ab_base.tgz timeout $(( $(left) * 3 / 5 )) bash benchmarks/ab.sh \
      python3 benchmarks/bench_decode_hm.py --heads 128 --ts 64,8,1 --pair fp8_584+fp8_584 --pair nvfp4_288+fp8_528 \
      --only "=heads on M QK/PV split, splits auto, L2 prefetch" --only "2-CTA cluster" >"$OUT/ab_cluster.log" 2>&1
    env TRITON_PTXAS_PATH=$p13 KVTUNE_CACHE_DIR=/tmp/kvc13 timeout $(( $(left) - 5 )) python3 -m pytest -q $XDIST \
      tests/tuner/test_decode_wgmma.py -p no:cacheprovider -rA -k "${AB_K:-cluster_build_matches}" \
      >"$OUT/results/pytest_decode_${abp%.patch}_gpu_h200.log" 2>&1
    echo "pytest rc=$?" >>"$OUT/results/pytest_decode_${abp%.patch}_gpu_h200.log"
    ;;
  ab-decode)  # A/B in one call (a call of its own: the copy stays patched) of benchmarks/patches/$AB_PATCH, a patch of
    # the decode builds, with Triton's ptxas: the 128-head QK / PV split with and without its L2 prefetch, both pairs,
    # T = 64, 8, 1; then the GPU tests of test_decode_wgmma.py that AB_K picks (pytest -k) on the patched tree. AB_PAIRS
    # and AB_BUILDS (labels, ';'-separated) narrow the A/B where device time is short; AB_HEADS (default 128) names
    # the head counts, e.g. AB_HEADS="16 128" AB_BUILDS="wgmma 1 warpgroup, splits auto;warp-specialised, splits auto".
    abp=${AB_PATCH:?ab-decode: name the patch (AB_PATCH=NAME.patch)}
    ab_patch "$abp"
    aargs=(); for p in ${AB_PAIRS:-fp8_584+fp8_584 nvfp4_288+fp8_528}; do aargs+=(--pair "$p"); done
    IFS=';' read -ra bs <<<"${AB_BUILDS:-heads on M QK/PV split, splits auto, L2 prefetch;heads on M QK/PV split, splits auto}"
    for b in "${bs[@]}"; do aargs+=(--only "=$b"); done
    for h in ${AB_HEADS:-128}; do aargs+=(--heads "$h"); done
    # AB_TEST_S: seconds kept for the GPU tests (default: 2/5 of what is left; the wgmma tests' cold
    # compiles take ~200 s at PYTEST_N=12, more than two A/Bs in one call leave them).
    ab_s=$(( ${AB_TEST_S:-0} > 0 ? $(left) - ${AB_TEST_S:-0} : $(left) * 3 / 5 ))
    env BASE_TGZ=/tmp/ab_base.tgz timeout $ab_s bash benchmarks/ab.sh \
      python3 benchmarks/bench_decode_hm.py --ts 64,8,1 "${aargs[@]}" >"$OUT/ab_decode.log" 2>&1
    timeout $(( $(left) - 5 )) python3 -m pytest -q $XDIST tests/tuner/test_decode_wgmma.py -p no:cacheprovider -rA \
      -k "${AB_K:-heads_on_m_matches}" >"$OUT/results/pytest_decode_${abp%.patch}_gpu_h200.log" 2>&1
    echo "pytest rc=$?" >>"$OUT/results/pytest_decode_${abp%.patch}_gpu_h200.log"
    ;;
  ab-logits)  # A/B in one call (a call of its own: the copy stays patched) of benchmarks/patches/$AB_PATCH, a patch of the
    # logits wgmma build: mxfp4_68 at B=64 x 64K, the kept config (AB_PICK), each side's SM clock sampled too (--clock:
    # a power-capped run is not a slower kernel); then the wgmma logits GPU tests on the patched tree
    abp=${AB_PATCH:?ab-logits: name the patch (AB_PATCH=NAME.patch)}
    ab_patch "$abp"
    env BASE_TGZ=/tmp/ab_base.tgz timeout $(( $(left) * 3 / 5 )) bash benchmarks/ab.sh \
      python3 benchmarks/bench_logits.py --formats mxfp4_68 --shapes B=64 --skip-checks --clock \
      --pick "${AB_PICK:-dot=wgmma,LOADS=descriptor,TILES=16,num_stages=2}" >"$OUT/ab_logits.log" 2>&1
    timeout $(( $(left) - 5 )) python3 -m pytest -q $XDIST tests/tuner/test_logits.py -p no:cacheprovider -rA \
      -k "wgmma_matches_reference or (key_scaled and wgmma)" >"$OUT/results/pytest_logits_${abp%.patch}_gpu_h200.log" 2>&1
    echo "pytest rc=$?" >>"$OUT/results/pytest_logits_${abp%.patch}_gpu_h200.log"
    ;;
  cluster-probe)  # the 2-CTA cluster path a 128-head build would take (benchmarks/cluster_probe.py): a DSMEM store and
    # the half-tile hand-over (cp.async.bulk into the peer, its mbarrier's bytes) read back on the GPU; seconds
    timeout $(( $(left) - 5 )) python3 -m pytest -q tests/tuner/test_cluster_probe.py -p no:cacheprovider -rA \
      >"$OUT/results/pytest_cluster_probe_gpu_h200.log" 2>&1
    echo "pytest rc=$?" >>"$OUT/results/pytest_cluster_probe_gpu_h200.log"
    # again with a newer ptxas when one is carried in (.ptxas/ptxas-*.gz: `benchmarks/README.md`, C7518): do its
    # cubins load under this driver?
    if p13=$(ptxas13); then
      nvidia-smi --query-gpu=driver_version --format=csv,noheader >"$OUT/results/pytest_cluster_probe_ptxas13_gpu_h200.log"
      TRITON_PTXAS_PATH=$p13 KVTUNE_CACHE_DIR=/tmp/kvc13 TRITON_CACHE_DIR=/tmp/tc13 timeout $(( $(left) - 5 )) \
        python3 -m pytest -q tests/tuner/test_cluster_probe.py -p no:cacheprovider -rA \
        >>"$OUT/results/pytest_cluster_probe_ptxas13_gpu_h200.log" 2>&1
      echo "pytest rc=$?" >>"$OUT/results/pytest_cluster_probe_ptxas13_gpu_h200.log"
    fi
    ;;
  cluster)  # the 2-CTA cluster build of the QK / PV split (MMA=wgmma_hmpvc): its GPU test (bit for bit the split's),
    # then both of issue 28's pairs at 128 heads (HEADS), T = 64, 8, 1, beside the split, all with Triton's ptxas and
    # again with the newer one carried in (.ptxas/: ptxas 12.8 serializes the cluster build's wgmmas, C7518)
    # (each run's ptxas through env, so nothing leaks into the phases after this one)
    # Its GPU test alone compiles for about 90 s from a cold cache (H100, 2026-12-06), under a third of what is left:
    # with less than 300 s its timeout reads as a hang, so the phase says so and runs nothing.
    [ "$(left)" -ge 300 ] || { echo "cluster: needs 300 s (the GPU test compiles ~90 s cold), $(left) left: not run"; continue; }
    for px in ${CLUSTER_PTXAS:-ptxas13 triton}; do
      if [ $px = ptxas13 ]; then p13=$(ptxas13) || continue; px_env=(TRITON_PTXAS_PATH=$p13 KVTUNE_CACHE_DIR=/tmp/kvc13)
      else px_env=(-u TRITON_PTXAS_PATH KVTUNE_CACHE_DIR=/tmp/kvc); fi
      env "${px_env[@]}" timeout $(( $(left) / 3 )) python3 -m pytest -q $XDIST tests/tuner/test_decode_wgmma.py -p no:cacheprovider -rA \
        -k "cluster_build_matches" >"$OUT/results/pytest_decode_cluster_${px}_gpu_h200.log" 2>&1
      rc=$?
      echo "pytest rc=$rc" >>"$OUT/results/pytest_decode_cluster_${px}_gpu_h200.log"
      [ $rc = 124 ] && { echo "cluster: the GPU test timed out (a hang?); nothing timed"; break; }
      hargs=(); for h in ${HEADS:-128}; do hargs+=(--heads "$h"); done
      mkdir -p "$OUT/results/cluster_$px"
      env "${px_env[@]}" timeout $(( $(left) / 2 )) python3 benchmarks/bench_decode_hm.py "${hargs[@]}" --ts 64,8,1 \
        --pair fp8_584+fp8_584 --pair nvfp4_288+fp8_528 --only "=heads on M QK/PV split, splits auto, L2 prefetch" \
        --only "2-CTA cluster" --out "$OUT/results/cluster_$px" >"$OUT/bench_decode_cluster_$px.log" 2>&1
      echo "bench_decode_hm rc=$?" >>"$OUT/bench_decode_cluster_$px.log"
    done
    ;;
  heads-on-m)  # the heads-on-M builds (MMA=wgmma_hm, wgmma_hmws, wgmma_hmpv): their GPU tests on four
    # pairs (~60 s a test with a cold cache), then both of issue 28's pairs timed at H = 64, 128 (HEADS overrides)
    # beside two warpgroups
    timeout $(( $(left) / 2 )) python3 -m pytest -q $XDIST tests/tuner/test_decode_wgmma.py -k "heads_on_m_matches_reference" \
      -p no:cacheprovider -rA >"$OUT/results/pytest_decode_hm_gpu_h200.log" 2>&1
    echo "pytest rc=$?" >>"$OUT/results/pytest_decode_hm_gpu_h200.log"
    hargs=(); for h in ${HEADS:-64 128}; do hargs+=(--heads "$h"); done
    timeout $(( $(left) - 5 )) python3 benchmarks/bench_decode_hm.py "${hargs[@]}" --pair nvfp4_288+fp8_528 \
      --pair fp8_584+fp8_584 --only "heads on M" --only "2 warpgroups, splits auto" --out "$OUT/results" \
      >"$OUT/bench_decode_hm.log" 2>&1
    echo "bench_decode_hm rc=$?" >>"$OUT/bench_decode_hm.log"
    ;;
  prefetch-tests)  # 2026-12-05's builds, compiled on the CPU only: GPU tests of the QK / PV split (wgmma_hmpv),
    # of every warp-specialised build with PREFETCH=1, and of ws / hmws without it (their slots now load a tile
    # further ahead): ~26 tests, on PYTEST_N workers
    timeout $(( $(left) - 5 )) python3 -m pytest -q $XDIST tests/tuner/test_decode_wgmma.py \
      -k "heads_on_m_matches_reference and (hmws or hmpv) or ws_matches_reference" \
      -p no:cacheprovider -rA >"$OUT/results/pytest_decode_prefetch_gpu_h200.log" 2>&1
    echo "pytest rc=$?" >>"$OUT/results/pytest_decode_prefetch_gpu_h200.log"
    ;;
  prefetch)  # the warp-specialised builds with and without PREFETCH=1 (L2 prefetch a tile further ahead) and the
    # QK / PV split, both of issue 28's pairs at H = 16 (the #26 seed shape), 64, 128, T = 8 and 64 (HEADS, TS
    # override; PAIRS too); decode_hm_h200.md ends with each PREFETCH row's ratio to its build's. The QK / PV
    # split, never run on a GPU before, goes last (a hang loses only its rows: each row is written as it comes)
    hargs=(); for h in ${HEADS:-16 64 128}; do hargs+=(--heads "$h"); done
    for p in ${PAIRS:-nvfp4_288+fp8_528 fp8_584+fp8_584}; do hargs+=(--pair "$p"); done
    timeout $(( $(left) - 5 )) python3 benchmarks/bench_decode_hm.py "${hargs[@]}" --ts "${TS:-8,64}" \
      --only "warp-specialised, splits auto" \
      --only "QK/PV split, splits auto" --out "$OUT/results" >"$OUT/bench_decode_prefetch.log" 2>&1
    echo "bench_decode_hm rc=$?" >>"$OUT/bench_decode_prefetch.log"
    ;;
  timeline-cluster)  # what binds the cluster build (MMA=wgmma_hmpvc) beside the split it pairs, from inside: 128 heads,
    # T = 64, both pairs, PREFETCH 0 and 1; with the carried-in ptxas (.ptxas/) when there is one
    px_env=(); p13=$(ptxas13) && px_env=(TRITON_PTXAS_PATH=$p13 KVTUNE_CACHE_DIR=/tmp/kvc13)
    env "${px_env[@]}" timeout $(( $(left) - 5 )) python3 benchmarks/decode_timeline.py --build wgmma_hmpv --build wgmma_hmpvc \
      --heads 128 --t "${TIMELINE_T:-64}" --out "$OUT/results" >"$OUT/decode_timeline_cluster.log" 2>&1
    echo "decode_timeline rc=$?" >>"$OUT/decode_timeline_cluster.log"
    ;;
  timeline)  # what binds the wgmma builds: their trace builds' per-tile timelines (PREFETCH 0 and 1); one pair a
    # call (TL_PAIR; each traced kernel is a cold compile, ~30 s); TL_BUILDS, TL_HEADS and TL_T narrow the runs
    tl=(); for b in ${TL_BUILDS:-}; do tl+=(--build "$b"); done
    [ -n "${TL_HEADS:-}" ] && tl+=(--heads "$TL_HEADS"); [ -n "${TL_T:-}" ] && tl+=(--t "$TL_T")
    timeout $(( $(left) - 5 )) python3 benchmarks/decode_timeline.py --pair "${TL_PAIR:-nvfp4_288+fp8_528}" "${tl[@]}" \
      --out "$OUT/results" >"$OUT/decode_timeline.log" 2>&1
    echo "decode_timeline rc=$?" >>"$OUT/decode_timeline.log"
    ;;
  ncu-producer)  # where the heads-on-M producer waits (2026-12-05: its loads take 2 us a tile from L2 as from DRAM,
    # and loading a tile ahead in registers made it slower): Nsight Compute's per-SASS-line stall samples of the QK / PV
    # split with PREFETCH=1 at 128 heads T=64 (NCU_CASES overrides), then ncu_stalls.py's summary by class
    timeout $(( $(left) - 20 )) env SOURCE_ONLY=1 CASES="${NCU_CASES:-64:0:128:wgmma_hmpv:4:1}" \
      bash benchmarks/ncu_wgmma_profiles.sh >"$OUT/ncu_producer.log" 2>&1
    for f in "$OUT"/ncu/*.sass.csv; do
      [ -f "$f" ] && python3 benchmarks/ncu_stalls.py "$f" --md "${f%.sass.csv}.stalls.md" >>"$OUT/ncu_producer.log" 2>&1
    done
    ;;
  ws)  # the warp-specialised build (MMA=wgmma_ws): its GPU tests on every pair (the V4.1 pair's first run), then
    # its timings beside one and two warpgroups on both of issue 28's pairs (HEADS overrides: 16 64)
    timeout $(( $(left) / 2 )) python3 -m pytest -q $XDIST tests/tuner/test_decode_wgmma.py -k "wgmma_ws_matches_reference" \
      -p no:cacheprovider -rA >"$OUT/results/pytest_decode_ws_gpu_h200.log" 2>&1
    echo "pytest rc=$?" >>"$OUT/results/pytest_decode_ws_gpu_h200.log"
    hargs=(); for h in ${HEADS:-16 64}; do hargs+=(--heads "$h"); done
    timeout $(( $(left) - 5 )) python3 benchmarks/bench_decode_hm.py "${hargs[@]}" --pair nvfp4_288+fp8_528 \
      --pair fp8_584+fp8_584 --only "1 warpgroup, splits auto" --only "2 warpgroups, splits auto" \
      --only "warp-specialised, splits auto" --out "$OUT/results" >"$OUT/bench_decode_ws.log" 2>&1
    echo "bench_decode_hm rc=$?" >>"$OUT/bench_decode_ws.log"
    ;;
  wsr)  # the register-producer build (MMA=wgmma_wsr: two register-loading producers, two consumer warpgroups, three K
    # buffers; 2026-12-07): its timings beside ws at 16 and 128 heads (HEADS overrides) on both of issue 28's pairs
    # (WSR_PAIRS overrides; each launch checked against float64 first), its GPU tests (WSR_K narrows them), then the
    # traced timelines of ws and wsr at 16 heads T=64 with the time left
    hargs=(); for h in ${HEADS:-16 128}; do hargs+=(--heads "$h"); done
    pargs=(); for p in ${WSR_PAIRS:-nvfp4_288+fp8_528 fp8_584+fp8_584}; do pargs+=(--pair "$p"); done
    timeout $(( $(left) / 2 )) python3 benchmarks/bench_decode_hm.py "${hargs[@]}" "${pargs[@]}" \
      --only "=warp-specialised, splits auto" --only "register producers, splits auto" --out "$OUT/results" \
      >"$OUT/bench_decode_wsr.log" 2>&1
    echo "bench_decode_hm rc=$?" >>"$OUT/bench_decode_wsr.log"
    timeout $(( $(left) * 3 / 4 )) python3 -m pytest -q $XDIST tests/tuner/test_decode_wgmma.py -k "${WSR_K:-wsr}" \
      -p no:cacheprovider -rA >"$OUT/results/pytest_decode_wsr_gpu.log" 2>&1
    echo "pytest rc=$?" >>"$OUT/results/pytest_decode_wsr_gpu.log"
    timeout $(( $(left) - 5 )) python3 benchmarks/decode_timeline.py --pair nvfp4_288+fp8_528 --build wgmma_ws \
      --build wgmma_wsr --heads 16 --t 64 --out "$OUT/results" >"$OUT/decode_timeline.log" 2>&1
    echo "decode_timeline rc=$?" >>"$OUT/decode_timeline.log"
    ;;
  decode-heads)  # issue 28: both record pairs at H = 32 and 64 (HEADS overrides), T = 1, 8, 64
    for h in ${HEADS:-32 64}; do
      timeout $(( $(left) / 2 )) python3 benchmarks/bench_decode.py --heads "$h" --ts 1,8,64 --skip-checks \
        --budget-s $(( $(left) / 2 - 60 )) --name "decode_h$h" --out "$OUT/results" >"$OUT/bench_decode_h$h.log" 2>&1
      echo "bench_decode H=$h rc=$?" >>"$OUT/bench_decode_h$h.log"
    done
    ;;
  merge-tests)  # the GPU tests of COMBINE=fused on the heads-on-N builds (the token's programs merging their partials)
    timeout $(( $(left) - 5 )) python3 -m pytest -q $XDIST tests/tuner/test_decode_wgmma.py tests/tuner/test_warmup.py \
      -p no:cacheprovider -rA -k "${MERGE_K:-merge_in_kernel or wgmma_decode_keys}" \
      >"$OUT/results/pytest_decode_merge_in_kernel_gpu_h200.log" 2>&1
    echo "pytest rc=$?" >>"$OUT/results/pytest_decode_merge_in_kernel_gpu_h200.log"
    ;;
  combine-sweep)  # decode_combine alone over (T, heads, partials) at its picked tile and the others (~4.5 min on the
    # H200; COMBINE_SWEEP_ARGS="--ts 8 --heads 64,128" a part of the grid)
    timeout $(( $(left) - 5 )) python3 benchmarks/combine_sweep.py --out "$OUT/results" ${COMBINE_SWEEP_ARGS:-} \
      >"$OUT/combine_sweep.log" 2>&1
    echo "combine_sweep rc=$?" >>"$OUT/combine_sweep.log"
    ;;
  merge-share)  # what the split merge (decode_combine) costs the wgmma picks at small T: whole, without it, alone
    # MERGE_SHARE_ARGS: --ws (the warp-specialised build's rows), --row COMP+WIN:H:T:PICK; MERGE_SHARE_NAME the file
    timeout $(( $(left) - 5 )) python3 benchmarks/decode_merge_share.py ${MERGE_SHARE_ARGS:-} \
      --name "${MERGE_SHARE_NAME:-decode_merge_share_h200}" --out "$OUT/results" \
      >"$OUT/decode_merge_share.log" 2>&1
    echo "decode_merge_share rc=$?" >>"$OUT/decode_merge_share.log"
    ;;
  decode)
    d_s=${DECODE_S:-$(( $(left) - 10 ))}
    timeout $d_s python3 benchmarks/bench_decode.py --budget-s $(( d_s - 80 )) --out "$OUT/results" \
      >"$OUT/bench_decode.log" 2>&1
    echo "bench_decode rc=$?" >>"$OUT/bench_decode.log"
    ;;
  tune)  # issue 5's run: kvtune tune for decode at the seed shape over T = 1..64, within its budget; TUNE_HEADS
    # (issue 28: 64, 128), TUNE_FORMATS (comp,win: fp8_584,fp8_584) and TUNE_TRIALS (8) override
    name=tune_decode${TUNE_HEADS:+_h$TUNE_HEADS}${TUNE_FORMATS:+_${TUNE_FORMATS//,/_}}_h200
    timeout $(( $(left) - 5 )) python3 -m kvtune.cli tune --kernel decode --arch auto --heads "${TUNE_HEADS:-16}" \
      --topk 512 --window 128 ${TUNE_FORMATS:+--formats "$TUNE_FORMATS"} --trials "${TUNE_TRIALS:-8}" \
      --time-budget $(( $(left) - 60 )) --out "$OUT/results/$name.json" >"$OUT/$name.log" 2>&1
    echo "tune rc=$?" >>"$OUT/$name.log"
    ;;
  logits-breakdown)  # the mxfp4_68 dot paths, stage by stage
    timeout $(( $(left) - 5 )) python3 benchmarks/logits_breakdown.py --fmt mxfp4_68 \
      --cfg "dot=fp8keylut,LOADS=descriptor,TILES=16,num_stages=3" --cfg "dot=fp8lut,LOADS=descriptor,TILES=16,num_stages=3" \
      --out "$OUT/results" >"$OUT/logits_breakdown.log" 2>&1
    echo "logits_breakdown rc=$?" >>"$OUT/logits_breakdown.log"
    ;;
  breakdown)  # leave-one-stage-out timings of the measured best configs
    timeout 200 python3 benchmarks/decode_breakdown.py --cfg "BLOCK_N=64,PREFETCH=1,backend=lut" --cfg "LISTS=apart,PREFETCH=1,backend=lut" \
      --out "$OUT/results" >"$OUT/decode_breakdown.log" 2>&1
    echo "decode_breakdown rc=$?" >>"$OUT/decode_breakdown.log"
    timeout $(( $(left) - 5 )) python3 benchmarks/logits_breakdown.py --cfg "" --cfg "TILES=16" \
      --cfg "MMA=heads_m,dot=scaled,BLOCK_N=128,TILES=8" --out "$OUT/results" >"$OUT/logits_breakdown.log" 2>&1
    echo "logits_breakdown rc=$?" >>"$OUT/logits_breakdown.log"
    ;;
  logits-tests)  # the logits tests on the GPU: every sm_90-legal variant against the reference
    # (~310 s on the H200: the wgmma tests, ~40 s more, are a phase of their own to fit a call)
    timeout $(( $(left) - 5 )) python3 -m pytest -q tests/tuner/test_logits.py \
      -k "(matches_reference or key_scaled or over_2gib) and not wgmma" -p no:cacheprovider \
      >"$OUT/results/pytest_logits_gpu_h200.log" 2>&1
    echo "pytest rc=$?" >>"$OUT/results/pytest_logits_gpu_h200.log"
    ;;
  wgmma-tests)  # the Gluon wgmma path's GPU tests (reference, key-scaled exactness, warmup keys)
    timeout $(( $(left) - 5 )) python3 -m pytest -q tests/tuner/test_logits.py tests/tuner/test_warmup.py \
      -k "wgmma or over_2gib" -p no:cacheprovider >"$OUT/results/pytest_wgmma_gpu_h200.log" 2>&1
    echo "pytest rc=$?" >>"$OUT/results/pytest_wgmma_gpu_h200.log"
    ;;
  decode-wgmma-tests)  # the decode tile's Gluon wgmma path on the GPU (T=1..64, every split count, every head count)
    timeout $(( ${WGMMA_TESTS_S:-$(( $(left) - 5 ))} )) python3 -m pytest -q tests/tuner/test_decode_wgmma.py ${WGMMA_K:+-k "$WGMMA_K"} -p no:cacheprovider \
      >"$OUT/results/pytest_decode_wgmma_gpu_h200.log" 2>&1
    echo "pytest rc=$?" >>"$OUT/results/pytest_decode_wgmma_gpu_h200.log"
    ;;
  gpu-tests)  # the tests that only run on a GPU (the whole suite compiles too much to fit here)
    timeout $(( $(left) - 5 )) python3 -m pytest -q tests/tuner -k "gpu_graph_timing or over_2gib" -p no:cacheprovider \
      >"$OUT/pytest_gpu.log" 2>&1
    echo "pytest rc=$?" >>"$OUT/pytest_gpu.log"
    ;;
  *)
    echo "unknown phase $phase ($PHASES)" >&2
    ;;
  esac
done
echo "call took $(( $(date +%s) - t0 )) s"
tail -n 3 "$OUT"/*.log
# Results are named for the H200 (issue records are the H200's); a call the tool ran on another card (it may
# give an H100 for nvidia-h200) renames them for that card (h100, ...), so no file claims the wrong one.
card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case "$card" in *H200*) tag=h200 ;; *H100*) tag=h100 ;; *) tag=$(echo "${card:-unknown}" | tr -cs 'A-Za-z0-9' '_' | tr 'A-Z' 'a-z') ;; esac
if [ "$tag" != h200 ]; then
  find "$OUT" -depth -name '*_h200*' | while read -r f; do  # results/ and ab.sh's base/, head/
    b=$(basename "$f"); mv "$f" "$(dirname "$f")/${b//_h200/_$tag}"
  done
  echo "results renamed for this card: _h200 -> _$tag ($card)"
fi
# The device tool brings back at most 8 files: results and tables travel as one archive
# (here: tar xzf out.tgz, then copy tables/*.json into benchmarks/tables/), an A/B's sides too
# (results/ab/: base, head, head2, base2 and their logs; `python benchmarks/ab_table.py results/ab NAME ...`).
for side in base head head2 base2; do
  [ -d "$OUT/$side" ] || continue
  mkdir -p "$OUT/results/ab" && mv "$OUT/$side" "$OUT/results/ab/" && mv "$OUT/$side.log" "$OUT/results/ab/" 2>/dev/null
done
# A second run of this script in the same command archives into out2.tgz (and so on), not over the first's.
arc="$OUT/out.tgz"; n=1
while [ -e "$arc" ]; do n=$((n + 1)); arc="$OUT/out$n.tgz"; done
tar czf "$arc" -C "$OUT" results tables && rm -rf "$OUT/results" "$OUT/tables"
