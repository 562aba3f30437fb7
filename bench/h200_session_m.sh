#!/usr/bin/env bash
# Device session M on the lent H200 (carry .whlp, installed as in h200_session_g.sh: pipeline_runs needs pydantic; on 2026-12-03 it ran in the same call as the latency floor): the Triton split-K landscape of session G again,
# same 135-point subspace on q_b_proj, at M=16 instead of M=1, so the search benchmark has a measured
# landscape at a second batch size (transfer from neighbours measured, not only on the synthetic one).
# Afterwards, here: python bench/search_benchmark.py --merge \
#   bench/landscapes/2026-12-03-h200-landscape-dense_gemm_splitk-q_b_proj.json bench/landscapes/<this file>
source "$(dirname "$0")/device_lib.sh"
LS='{"BLOCK_M":[16],"BLOCK_N":[16,32,64,128],"BLOCK_K":[64,128,256,512],"SPLIT_K":[1,2,4,8],"num_warps":[2,4,8],"num_stages":[3],"constraints":["BLOCK_M >= M","BLOCK_M < 2 * M or BLOCK_M == 16","BLOCK_K * SPLIT_K <= K","BLOCK_N <= N","BLOCK_N * BLOCK_K <= 32768","num_stages * (BLOCK_M + BLOCK_N) * BLOCK_K * 2 <= 196608"]}'
pr "${KT_M_LAND_S:-420}" 12 --what triton-landscape-m16 --variants kernels/variants/triton/dense_gemm_splitk.py --space "$LS" --configs all --shapes q_b_proj --batches 16 --landscape --min-time 0.1
grep -E "^== |wrote" "$L" | tail -12
