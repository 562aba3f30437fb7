#!/usr/bin/env bash
# Device session D on the lent H200 (issues: GPU evaluation, search): the Triton and CuTe DSL
# dense_gemm variants through the worker's real evaluation on every K2 TP8 shape at every batch
# size, the cheat and harness tests on the GPU, and the two search landscapes on q_b_proj.
# Needs the CuTe DSL wheel (.whl) installed first. Everything lands in $OUT (at most 8 files).
source "$(dirname "$0")/device_lib.sh"
T='[{"BLOCK_M":16,"BLOCK_N":64,"BLOCK_K":256,"SPLIT_K":4,"num_warps":4,"num_stages":3},{"BLOCK_M":32,"BLOCK_N":64,"BLOCK_K":256,"SPLIT_K":4,"num_warps":4,"num_stages":3},{"BLOCK_M":64,"BLOCK_N":64,"BLOCK_K":256,"SPLIT_K":4,"num_warps":4,"num_stages":3},{"BLOCK_M":16,"BLOCK_N":32,"BLOCK_K":256,"SPLIT_K":1,"num_warps":4,"num_stages":3},{"BLOCK_M":32,"BLOCK_N":32,"BLOCK_K":256,"SPLIT_K":1,"num_warps":4,"num_stages":3},{"BLOCK_M":64,"BLOCK_N":32,"BLOCK_K":256,"SPLIT_K":1,"num_warps":4,"num_stages":3}]'
pr "${KT_D_DENSE_S:-130}" 10 --what dense-gemm-triton --variants kernels/variants/triton/dense_gemm_splitk.py --configs "$T"
pr "${KT_D_CUTE_S:-110}" 10 --what dense-gemm-cute --variants kernels/variants/cute/dense_gemm_warp_gemv.py --configs default
KT_TEST_DEVICE=cuda run timeout 75 python3 -m pytest -q --noconftest tests/test_cheats.py tests/test_harness.py -p no:cacheprovider
pr 60 12 --what cute-landscape --variants kernels/variants/cute/dense_gemm_warp_gemv.py --configs all --shapes q_b_proj --batches 1,16 --landscape --min-time 0.1
LS='{"BLOCK_M":[16],"BLOCK_N":[16,32,64,128],"BLOCK_K":[64,128,256,512],"SPLIT_K":[1,2,4,8],"num_warps":[4],"num_stages":[3],"constraints":["BLOCK_M >= M","BLOCK_M < 2 * M or BLOCK_M == 16","BLOCK_K * SPLIT_K <= K","BLOCK_N <= N","BLOCK_N * BLOCK_K <= 32768","num_stages * (BLOCK_M + BLOCK_N) * BLOCK_K * 2 <= 196608"]}'
pr "${KT_D_LAND_S:-130}" 12 --what triton-landscape --variants kernels/variants/triton/dense_gemm_splitk.py --space "$LS" --configs all --shapes q_b_proj --batches 1,16 --landscape --min-time 0.1
rm -f "$OUT"/*-cute-landscape.json "$OUT"/*-triton-landscape.json  # the same rows as the landscape files
grep -E "^== |wrote|passed|failed" "$L" | tail -24
