#!/usr/bin/env bash
# Device session G on the lent H200 (next session): what sessions D-F could not finish, with the CuTe
# DSL wheel (.whl) and the pipeline wheels (.whlp): the MoE variant through the worker's evaluation
# (its stock now timed eagerly), the full CuTe and Triton landscapes on q_b_proj, and the Triton
# split-K runs on lm_head. Then run bench/h200_session_h.sh (service wheels) for the service jobs.
source "$(dirname "$0")/device_lib.sh"
pr 100 8 --what moe-experts --variants kernels/variants/triton/moe_experts_grouped.py --batches 1,4,16,64
pr "${KT_G_CUTE_S:-100}" 12 --what cute-landscape --variants kernels/variants/cute/dense_gemm_warp_gemv.py --configs all --shapes q_b_proj --batches 1,16 --landscape --min-time 0.1
LS='{"BLOCK_M":[16],"BLOCK_N":[16,32,64,128],"BLOCK_K":[64,128,256,512],"SPLIT_K":[1,2,4,8],"num_warps":[4],"num_stages":[3],"constraints":["BLOCK_M >= M","BLOCK_M < 2 * M or BLOCK_M == 16","BLOCK_K * SPLIT_K <= K","BLOCK_N <= N","BLOCK_N * BLOCK_K <= 32768","num_stages * (BLOCK_M + BLOCK_N) * BLOCK_K * 2 <= 196608"]}'
pr "${KT_G_LAND_S:-180}" 12 --what triton-landscape --variants kernels/variants/triton/dense_gemm_splitk.py --space "$LS" --configs all --shapes q_b_proj --batches 1 --landscape --min-time 0.1
T='[{"BLOCK_M":16,"BLOCK_N":64,"BLOCK_K":256,"SPLIT_K":4,"num_warps":4,"num_stages":3},{"BLOCK_M":32,"BLOCK_N":64,"BLOCK_K":256,"SPLIT_K":4,"num_warps":4,"num_stages":3},{"BLOCK_M":64,"BLOCK_N":64,"BLOCK_K":256,"SPLIT_K":4,"num_warps":4,"num_stages":3},{"BLOCK_M":16,"BLOCK_N":32,"BLOCK_K":256,"SPLIT_K":1,"num_warps":4,"num_stages":3},{"BLOCK_M":32,"BLOCK_N":32,"BLOCK_K":256,"SPLIT_K":1,"num_warps":4,"num_stages":3},{"BLOCK_M":64,"BLOCK_N":32,"BLOCK_K":256,"SPLIT_K":1,"num_warps":4,"num_stages":3}]'
pr "${KT_G_LM_S:-100}" 10 --what dense-gemm-triton-lm-head --variants kernels/variants/triton/dense_gemm_splitk.py --configs "$T" --shapes lm_head
rm -f "$OUT"/*-cute-landscape.json "$OUT"/*-triton-landscape.json  # the landscape files hold the same rows
grep -E "^== |wrote|passed|failed" "$L" | tail -24
