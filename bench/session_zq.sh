#!/usr/bin/env bash
# Device session ZQ (carry .whl2 and .cutexz; install line as in h200_session_v.sh), session ZN's script with other
# plans: the ring GEMV with KSPLIT (more rows per CTA on a slice of K, partials met in the last CTA;
# bench/plans/make_ring_gemv_zp.py says why), through the service, resumed from the table of the card in hand:
# - an H200: table ZN (the table of record) with zq_all.json: the 44 KSPLIT runs, then the 64 of session ZP's 70
#   ring runs they do not hold (run on an H100 only); then the attention input block, the self-test of the new
#   export, and Nsight Compute's counters of ring configs beside cuBLAS (bench/ncu_dense.py);
# - an H100: its session ZP table with the 44 KSPLIT runs, then the attention input block and the self-test.
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
R=kernels/variants/cute/dense_gemm_ring_gemv.py
case "$HW" in
  h100) export KT_PLAN=bench/plans/ring_ksplit_zq.json KT_WHAT=decode-tuning-h100-zq KT_NCU_S=${KT_NCU_S:-60} \
          KT_RESUME_DB=bench/results/2026-12-06-h100-decode-tuning-h100-zp.sqlite KT_TUNING_S=${KT_TUNING_S:-200} ;;
  h200) export KT_PLAN=bench/plans/zq_all.json KT_WHAT=decode-tuning-zq KT_TUNING_S=${KT_TUNING_S:-300} \
          KT_RESUME_DB=bench/results/2026-12-06-h200-decode-tuning-zn.sqlite KT_NCU_S=${KT_NCU_S:-80} ;;
esac
export KT_ATTN_BATCHES=${KT_ATTN_BATCHES-1,4,16} KT_SELFTEST_S=${KT_SELFTEST_S:-50}
export KT_NCU_ITEMS="fused_qkv_a:16:$R:{\"WROWS\": 16, \"RT\": 4, \"KWARPS\": 8, \"STAGES\": 4, \"XRING\": 1, \"KSPLIT\": 4}
fused_qkv_a:16:$R:{\"WROWS\": 16, \"RT\": 1, \"KWARPS\": 7, \"STAGES\": 8, \"XRING\": 1, \"KSPLIT\": 1}
fused_qkv_a:16:stock
o_proj:16:$R:{\"WROWS\": 16, \"RT\": 4, \"KWARPS\": 2, \"STAGES\": 8, \"XRING\": 1, \"KSPLIT\": 2}
o_proj:16:stock"
exec bash "$(dirname "$0")/session_zn.sh"
