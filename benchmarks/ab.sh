#!/usr/bin/env bash
# A/B on one device call: the same benchmark command in an older tree and in this one, one after
# the other on the same GPU, so their times compare (different calls differ by a few percent).
# The device machine gets no git history: make the older tree's archive here first, carry it in.
#
#   git archive <rev> --format=tar.gz -o ab_base.tgz          # here (git-ignored: carry it, with .whl)
#   bash benchmarks/ab.sh python3 benchmarks/bench_logits.py --formats mxfp4_68 --shapes B=64 \
#       --pick "dot=fp8keylut,LOADS=descriptor,TILES=16,num_stages=3" --skip-checks   # on the device
#
# Each side's output goes to $OUT/base and $OUT/head (`--out` is appended to the command), its log
# to $OUT/<side>.log; the lines with a time ("us,") of both logs are printed at the end.
# AB_ORDER=abba (the default) times base, head, head again (head2), base again (base2): a call's
# second half ran 0.5-1.5% faster than its first for a build both trees share (H100, 2026-12-06,
# results/cluster/ab_relaxed_start_h100.md), so one base-then-head pass credits the head with that drift;
# ab_table.py averages each side's two runs, which cancels a drift linear in time. AB_ORDER=ab: one
# pass each, half the time.
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}
BASE_TGZ=${BASE_TGZ:-ab_base.tgz}
[ $# -gt 0 ] || { echo "usage: $0 <benchmark command...>" >&2; exit 2; }
[ -f "$BASE_TGZ" ] || { echo "no $BASE_TGZ: git archive <rev> --format=tar.gz -o $BASE_TGZ" >&2; exit 2; }
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit
fi
rm -rf /tmp/ab_base && mkdir -p /tmp/ab_base "$OUT" && tar xzf "$BASE_TGZ" -C /tmp/ab_base
export KVTUNE_CACHE_DIR=/tmp/kvc PYTHONUNBUFFERED=1
case "${AB_ORDER:-abba}" in
  abba) sides="base head head2 base2" ;;
  ab) sides="base head" ;;
  *) echo "AB_ORDER is abba or ab, not ${AB_ORDER}" >&2; exit 2 ;;
esac
for side in $sides; do
  dir=$PWD; [ "${side#base}" != "$side" ] && dir=/tmp/ab_base
  (cd "$dir" && PYTHONPATH=/tmp/site:$dir "$@" --out "$OUT/$side" >"$OUT/$side.log" 2>&1)
  echo "$side rc=$?" >>"$OUT/$side.log"
done
for side in $sides; do echo "== $side"; grep -h "us," "$OUT/$side.log" | sed 's/^ *//' | cut -c1-220; done
