#!/usr/bin/env bash
# Device session C on the lent H200: the two search landscapes (CuTe DSL and Triton dense_gemm on
# q_b_proj, every point of the space measured once through the worker's evaluation) and the Triton
# dense_gemm runs on lm_head that session B's time limit cut off. Needs the CuTe DSL wheel (.whl).
source "$(dirname "$0")/device_lib.sh"
T='[{"BLOCK_M":16,"BLOCK_N":64,"BLOCK_K":256,"SPLIT_K":4,"num_warps":4,"num_stages":3},{"BLOCK_M":32,"BLOCK_N":64,"BLOCK_K":256,"SPLIT_K":4,"num_warps":4,"num_stages":3},{"BLOCK_M":64,"BLOCK_N":64,"BLOCK_K":256,"SPLIT_K":4,"num_warps":4,"num_stages":3},{"BLOCK_M":16,"BLOCK_N":32,"BLOCK_K":256,"SPLIT_K":1,"num_warps":4,"num_stages":3},{"BLOCK_M":32,"BLOCK_N":32,"BLOCK_K":256,"SPLIT_K":1,"num_warps":4,"num_stages":3},{"BLOCK_M":64,"BLOCK_N":32,"BLOCK_K":256,"SPLIT_K":1,"num_warps":4,"num_stages":3}]'
pr 60 8 --what dense-gemm-triton-lm-head --variants kernels/variants/triton/dense_gemm_splitk.py --configs "$T" --shapes lm_head
pr 150 12 --what cute-landscape --variants kernels/variants/cute/dense_gemm_warp_gemv.py --configs all --shapes q_b_proj --batches 1,16 --landscape --min-time 0.1
LS='{"BLOCK_M":[16],"BLOCK_N":[16,32,64,128],"BLOCK_K":[64,128,256,512],"SPLIT_K":[1,2,4,8],"num_warps":[4],"num_stages":[3],"constraints":["BLOCK_M >= M","BLOCK_M < 2 * M or BLOCK_M == 16","BLOCK_K * SPLIT_K <= K","BLOCK_N <= N","BLOCK_N * BLOCK_K <= 32768","num_stages * (BLOCK_M + BLOCK_N) * BLOCK_K * 2 <= 196608"]}'
pr 120 12 --what triton-landscape --variants kernels/variants/triton/dense_gemm_splitk.py --space "$LS" --configs all --shapes q_b_proj --batches 1 --landscape --min-time 0.1
grep -E "^== |wrote" "$L" | tail -12
