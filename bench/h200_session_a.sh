#!/usr/bin/env bash
# Device session A on the lent H200 (issue: GPU evaluation): dense_gemm Triton and CuTe DSL variants
# through the worker's real evaluation at every batch size, the cheat tests on the GPU, and two
# measured landscapes for the search benchmark. Everything lands in $OUT (run.log + result files).
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KT_DATA_DIR=/tmp/kt
L=$OUT/run.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$L"
T='[{"BLOCK_M":16,"BLOCK_N":64,"BLOCK_K":256,"SPLIT_K":4,"num_warps":4,"num_stages":3},{"BLOCK_M":32,"BLOCK_N":64,"BLOCK_K":256,"SPLIT_K":4,"num_warps":4,"num_stages":3},{"BLOCK_M":64,"BLOCK_N":64,"BLOCK_K":256,"SPLIT_K":4,"num_warps":4,"num_stages":3},{"BLOCK_M":16,"BLOCK_N":32,"BLOCK_K":256,"SPLIT_K":1,"num_warps":4,"num_stages":3},{"BLOCK_M":32,"BLOCK_N":32,"BLOCK_K":256,"SPLIT_K":1,"num_warps":4,"num_stages":3},{"BLOCK_M":64,"BLOCK_N":32,"BLOCK_K":256,"SPLIT_K":1,"num_warps":4,"num_stages":3}]'
run() { echo "== $*" >> "$L"; "$@" >> "$L" 2>&1; echo "== exit $?" >> "$L"; }
run timeout 150 python3 bench/pipeline_runs.py --what dense-gemm-triton --variants kernels/variants/triton/dense_gemm_splitk.py --configs "$T" --timeout 60 --out "$OUT"
run timeout 100 python3 bench/pipeline_runs.py --what dense-gemm-cute --variants kernels/variants/cute/dense_gemm_warp_gemv.py --configs '[{"ROWS_PER_WARP":2,"WARPS_PER_CTA":4,"UNROLL":4}]' --timeout 60 --out "$OUT"
KT_TEST_DEVICE=cuda run timeout 90 python3 -m pytest -q --noconftest tests/test_cheats.py tests/test_harness.py -p no:cacheprovider -x
run timeout 70 python3 bench/pipeline_runs.py --what cute-landscape --variants kernels/variants/cute/dense_gemm_warp_gemv.py --configs all --shapes q_b_proj --batches 1,16,64 --landscape --timeout 60 --out "$OUT"
S='{"BLOCK_M":[16],"BLOCK_N":[16,32,64,128],"BLOCK_K":[64,128,256,512],"SPLIT_K":[1,2,4,8],"num_warps":[4],"num_stages":[3],"constraints":["BLOCK_M >= M","BLOCK_M < 2 * M or BLOCK_M == 16","BLOCK_K * SPLIT_K <= K","BLOCK_N <= N","BLOCK_N * BLOCK_K <= 32768","num_stages * (BLOCK_M + BLOCK_N) * BLOCK_K * 2 <= 196608"]}'
run timeout 120 python3 bench/pipeline_runs.py --what triton-landscape --variants kernels/variants/triton/dense_gemm_splitk.py --space "$S" --configs all --shapes q_b_proj --batches 1,16 --landscape --timeout 60 --out "$OUT"
rm -f "$OUT"/*-landscape.md "$OUT"/*-cute-landscape.json "$OUT"/*-triton-landscape.json
grep -E "^== |wrote|passed|failed" "$L" | tail -20
