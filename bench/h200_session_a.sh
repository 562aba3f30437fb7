#!/usr/bin/env bash
# Device session A on the lent H200 (issue: GPU evaluation): dense_gemm Triton and CuTe DSL variants
# through the worker's real evaluation at every batch size, the Triton kernels of the other slots,
# the cheat tests on the GPU, and two measured landscapes for the search benchmark. Evaluations run
# 8 at a time (compile and check side by side; workers/gpu_lock.py keeps the timed phases apart).
# Everything lands in $OUT (run.log + result files).
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KT_DATA_DIR=/tmp/kt
L=$OUT/run.log
P=${KT_PARALLEL:-8}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$L"
T='[{"BLOCK_M":16,"BLOCK_N":64,"BLOCK_K":256,"SPLIT_K":4,"num_warps":4,"num_stages":3},{"BLOCK_M":32,"BLOCK_N":64,"BLOCK_K":256,"SPLIT_K":4,"num_warps":4,"num_stages":3},{"BLOCK_M":64,"BLOCK_N":64,"BLOCK_K":256,"SPLIT_K":4,"num_warps":4,"num_stages":3},{"BLOCK_M":16,"BLOCK_N":32,"BLOCK_K":256,"SPLIT_K":1,"num_warps":4,"num_stages":3},{"BLOCK_M":32,"BLOCK_N":32,"BLOCK_K":256,"SPLIT_K":1,"num_warps":4,"num_stages":3},{"BLOCK_M":64,"BLOCK_N":32,"BLOCK_K":256,"SPLIT_K":1,"num_warps":4,"num_stages":3}]'
run() { echo "== $(date +%T) $*" >> "$L"; "$@" >> "$L" 2>&1; echo "== exit $? $(date +%T)" >> "$L"; }
pr() { run timeout "$1" python3 bench/pipeline_runs.py --parallel "$P" --timeout 90 --out "$OUT" "${@:2}"; }
pr 120 --what dense-gemm-triton --variants kernels/variants/triton/dense_gemm_splitk.py --configs "$T"
pr 110 --what dense-gemm-cute --variants kernels/variants/cute/dense_gemm_warp_gemv.py --configs '[{"ROWS_PER_WARP":2,"WARPS_PER_CTA":4,"UNROLL":4}]'
V=kernels/variants/triton
pr 80 --what slots-triton --variants $V/router_fused.py,$V/moe_experts_grouped.py,$V/shared_expert_fused.py,$V/oproj_residual_norm_fused.py,$V/add_rmsnorm_fused.py --batches 1,4,16,64
KT_TEST_DEVICE=cuda run timeout 70 python3 -m pytest -q --noconftest tests/test_cheats.py tests/test_harness.py -p no:cacheprovider
pr 45 --what cute-landscape --variants kernels/variants/cute/dense_gemm_warp_gemv.py --configs all --shapes q_b_proj --batches 1,16,64 --landscape --min-time 0.1
S='{"BLOCK_M":[16],"BLOCK_N":[16,32,64,128],"BLOCK_K":[64,128,256,512],"SPLIT_K":[1,2,4,8],"num_warps":[4],"num_stages":[3],"constraints":["BLOCK_M >= M","BLOCK_M < 2 * M or BLOCK_M == 16","BLOCK_K * SPLIT_K <= K","BLOCK_N <= N","BLOCK_N * BLOCK_K <= 32768","num_stages * (BLOCK_M + BLOCK_N) * BLOCK_K * 2 <= 196608"]}'
pr 100 --what triton-landscape --variants kernels/variants/triton/dense_gemm_splitk.py --space "$S" --configs all --shapes q_b_proj --batches 1,16 --landscape --min-time 0.1
rm -f "$OUT"/*.md "$OUT"/*-cute-landscape.json "$OUT"/*-triton-landscape.json  # .md tables are rebuilt from the JSON: 8 files come back
grep -E "^== |wrote|passed|failed" "$L" | tail -24
