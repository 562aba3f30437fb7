#!/usr/bin/env bash
# Device session ZR (carry .whl2 and .cutexz; install line as in h200_session_v.sh), session ZN's script with other
# plans, for what sessions ZP and ZQ could not reach (both calls came up on an H100), resumed from the table of the
# card in hand:
# - an H200: table ZN (the table of record) with zp_all.json: the ring GEMV's 70 runs of session ZP (KSPLIT 1: the
#   H100 call of session ZQ found every KSPLIT config slower than its KSPLIT 1 reference), then session ZO's 36
#   fenced neighbours; then the attention input block, the self-test of the new export, and Nsight Compute's
#   counters of the ring GEMV beside cuBLAS (bench/ncu_dense.py);
# - an H100: its session ZQ table with the rest of session ZN's H100 plan (zn_h100_rest.json: the fenced
#   tensor-core GEMV at q_b_proj M = 4 and 16 and o_proj, never run on an H100), then the self-test.
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
R=kernels/variants/cute/dense_gemm_ring_gemv.py
case "$HW" in
  h100) export KT_PLAN=bench/plans/zn_h100_rest.json KT_WHAT=decode-tuning-h100-zr KT_NCU_S=0 KT_ATTN_BATCHES= \
          KT_RESUME_DB=bench/results/2026-12-06-h100-decode-tuning-h100-zq.sqlite KT_TUNING_S=${KT_TUNING_S:-200} ;;
  h200) export KT_PLAN=bench/plans/zp_all.json KT_WHAT=decode-tuning-zr KT_TUNING_S=${KT_TUNING_S:-300} \
          KT_RESUME_DB=bench/results/2026-12-06-h200-decode-tuning-zn.sqlite KT_NCU_S=${KT_NCU_S:-80} \
          KT_ATTN_BATCHES=${KT_ATTN_BATCHES-1,4,16} ;;
esac
export KT_SELFTEST_S=${KT_SELFTEST_S:-50}
export KT_NCU_ITEMS="fused_qkv_a:16:$R:{\"WROWS\": 16, \"RT\": 1, \"KWARPS\": 7, \"STAGES\": 8, \"XRING\": 1}
fused_qkv_a:4:$R:{\"WROWS\": 16, \"RT\": 1, \"KWARPS\": 8, \"STAGES\": 8, \"XRING\": 1}
o_proj:16:$R:{\"WROWS\": 16, \"RT\": 2, \"KWARPS\": 2, \"STAGES\": 8, \"XRING\": 1}
o_proj:16:stock
fused_qkv_a:4:stock"
exec bash "$(dirname "$0")/session_zn.sh"
