#!/usr/bin/env bash
# Device session G on the lent H200, with the CuTe DSL wheel (.whl) and the pipeline wheels (.whlp):
# the two search landscapes of issue 4, every point of a space measured once through the worker's
# evaluation at q_b_proj M=1: the CuTe DSL GEMV's whole 64-point space and a 135-point subspace of
# the Triton split-K GEMM (BLOCK_M fixed by M, num_stages 3). Points run in a shuffled order and
# the landscape is rewritten after each, so a step cut by its limit leaves a uniform sample.
# The MoE and split-K dense jobs run through the service in bench/h200_session_h.sh.
source "$(dirname "$0")/device_lib.sh"
pr "${KT_G_CUTE_S:-150}" 12 --what cute-landscape --variants kernels/variants/cute/dense_gemm_warp_gemv.py --configs all --shapes q_b_proj --batches 1 --landscape --min-time 0.1
LS='{"BLOCK_M":[16],"BLOCK_N":[16,32,64,128],"BLOCK_K":[64,128,256,512],"SPLIT_K":[1,2,4,8],"num_warps":[2,4,8],"num_stages":[3],"constraints":["BLOCK_M >= M","BLOCK_M < 2 * M or BLOCK_M == 16","BLOCK_K * SPLIT_K <= K","BLOCK_N <= N","BLOCK_N * BLOCK_K <= 32768","num_stages * (BLOCK_M + BLOCK_N) * BLOCK_K * 2 <= 196608"]}'
pr "${KT_G_LAND_S:-370}" 12 --what triton-landscape --variants kernels/variants/triton/dense_gemm_splitk.py --space "$LS" --configs all --shapes q_b_proj --batches 1 --landscape --min-time 0.1
grep -E "^== |wrote" "$L" | tail -12
