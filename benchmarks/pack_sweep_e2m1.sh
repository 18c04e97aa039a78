set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit
export PYTHONPATH=$PWD:/tmp/site KVTUNE_CACHE_DIR=/tmp/kvc PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader
timeout 200 python3 -m pytest -q -n 14 tests/tuner/test_pack.py -p no:cacheprovider -rA \
  -k "matches_reference or every_bf16_value or query_quantiser_matches" > $OUT/pytest_pack_gpu.log 2>&1
echo "pytest rc=$?" >> $OUT/pytest_pack_gpu.log; tail -3 $OUT/pytest_pack_gpu.log
S="backend=swar"; B="backend=bf16x2"
P="BLOCKS_PER_PROG=8,num_stages=2"
timeout 200 python3 benchmarks/bench_pack.py --out $OUT/nvfp4 --formats nvfp4_288 \
  --pick "$S" --pick "$S,BLOCK_T=8" --pick "$B" --pick "$B,BLOCK_T=8" --pick "$B,BLOCK_T=8,num_warps=4" \
  --pick "$B,BLOCK_T=16,num_warps=4" --pick "$B,$P" --pick "$B,BLOCK_T=8,num_warps=4,$P" \
  --pick "$B,BLOCK_T=2,num_warps=1,$P" --pick "$S,$P" --pick "$B,BLOCK_T=16" \
  > $OUT/nvfp4.log 2>&1; echo rc=$? >> $OUT/nvfp4.log
timeout 150 python3 benchmarks/bench_pack.py --out $OUT/mxfp4 --formats mxfp4_68 \
  --pick "$S,BLOCK_T=16" --pick "$B,BLOCK_T=16" --pick "$B,BLOCK_T=8" --pick "$B,BLOCK_T=32,num_warps=2" \
  --pick "$B,BLOCK_T=16,num_warps=2" --pick "$B,BLOCK_T=16,$P" --pick "$B,BLOCK_T=8,$P" --pick "$S,BLOCK_T=16,$P" \
  > $OUT/mxfp4.log 2>&1; echo rc=$? >> $OUT/mxfp4.log
