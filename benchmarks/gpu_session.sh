#!/bin/bash
# One batched GPU session: Triton tests on CUDA, then the micro suite, then tuning variants.
# Usage (repo root): bash benchmarks/gpu_session.sh [driver|fx]
export PYTHONPATH=stages/01_dynamo:stages/02_aotautograd:stages/03_primtorch:stages/04_inductor:.
export PYTHONUNBUFFERED=1 MINIPT2_CACHE_DIR=/tmp/minipt2-cache
FRONTEND=${1:-driver}
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
timeout 200 python3 -m pytest stages/04_inductor/tests/test_reductions.py \
  stages/04_inductor/tests/test_fusion.py stages/04_inductor/tests/test_bench_smoke.py \
  stages/04_inductor/tests/test_prims.py -q -x -k "triton or smoke or workloads" \
  > $OUT/tests.log 2>&1; tail -3 $OUT/tests.log
python3 benchmarks/run.py --suite micro --frontend $FRONTEND --out $OUT/micro.json \
  > $OUT/micro.log 2>&1; tail -13 $OUT/micro.log
MINIPT2_TRITON_XBLOCK=2048 python3 benchmarks/run.py --suite micro --frontend $FRONTEND \
  --workloads trig,gelu_bias --no-torch-compile --out $OUT/xblock.json \
  > $OUT/xblock.log 2>&1; tail -6 $OUT/xblock.log
