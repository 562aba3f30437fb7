#!/usr/bin/env bash
# Device session H0 (carry .whl and .whlp), run just before bench/h200_session_h.sh on the same warm
# machine: installs CuTe DSL under /tmp/site for H's CuTe jobs, and meanwhile finishes issue 9's
# lm_head coverage through the worker's evaluation: the Triton split-K GEMM at every M (the config
# whose BLOCK_M fits M) and the CuTe GEMV at M=64, the two points sessions D's limits cut.
source "$(dirname "$0")/device_lib.sh"
T='[{"BLOCK_M":16,"BLOCK_N":64,"BLOCK_K":256,"SPLIT_K":4,"num_warps":4,"num_stages":3},{"BLOCK_M":32,"BLOCK_N":64,"BLOCK_K":256,"SPLIT_K":4,"num_warps":4,"num_stages":3},{"BLOCK_M":64,"BLOCK_N":64,"BLOCK_K":256,"SPLIT_K":4,"num_warps":4,"num_stages":3}]'
# side by side: workers/gpu_lock.py keeps their timed phases apart
pr "${KT_H0_S:-150}" 8 --what dense-gemm-triton-lm-head --variants kernels/variants/triton/dense_gemm_splitk.py --configs "$T" --shapes lm_head &
pr 100 2 --what dense-gemm-cute-lm-head --variants kernels/variants/cute/dense_gemm_warp_gemv.py --configs default --shapes lm_head --batches 64
wait
grep -E "^== |wrote|passed|failed" "$L" | tail -12
