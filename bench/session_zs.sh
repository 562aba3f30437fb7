#!/usr/bin/env bash
# Device session ZS (carry .whl2 and .cutexz; install line as in h200_session_v.sh), session ZN's script with other
# plans: the ring GEMV's ROTATE (bench/plans/make_ring_gemv_zp.py says why), through the service, resumed from the
# table of the card in hand:
# - an H100: its session ZR table with ring_rotate_zs.json (the best three ring configs per bucket, ROTATE 0 and 1),
#   then the attention input block, the self-test of the new export and Nsight Compute's counters of ROTATE 0/1;
# - an H200: table ZN (the table of record) with zs_all.json (ROTATE 1 of those, then session ZP's 70 ring runs),
#   then the same.
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
R=kernels/variants/cute/dense_gemm_ring_gemv.py
case "$HW" in
  h100) export KT_PLAN=bench/plans/ring_rotate_zs.json KT_WHAT=decode-tuning-h100-zs KT_TUNING_S=${KT_TUNING_S:-200} \
          KT_RESUME_DB=bench/results/2026-12-06-h100-decode-tuning-h100-zr.sqlite KT_NCU_S=${KT_NCU_S:-60} ;;
  h200) export KT_PLAN=bench/plans/zs_all.json KT_WHAT=decode-tuning-zs KT_TUNING_S=${KT_TUNING_S:-300} \
          KT_RESUME_DB=bench/results/2026-12-06-h200-decode-tuning-zn.sqlite KT_NCU_S=${KT_NCU_S:-80} ;;
esac
export KT_ATTN_BATCHES=${KT_ATTN_BATCHES-1,4,16} KT_SELFTEST_S=${KT_SELFTEST_S:-50}
export KT_NCU_ITEMS="fused_qkv_a:16:$R:{\"WROWS\": 16, \"RT\": 1, \"KWARPS\": 7, \"STAGES\": 8, \"XRING\": 1, \"ROTATE\": 1}
fused_qkv_a:16:$R:{\"WROWS\": 16, \"RT\": 1, \"KWARPS\": 7, \"STAGES\": 8, \"XRING\": 1, \"ROTATE\": 0}
fused_qkv_a:4:$R:{\"WROWS\": 16, \"RT\": 1, \"KWARPS\": 8, \"STAGES\": 8, \"XRING\": 1, \"ROTATE\": 1}
fused_qkv_a:4:$R:{\"WROWS\": 16, \"RT\": 1, \"KWARPS\": 8, \"STAGES\": 8, \"XRING\": 1, \"ROTATE\": 0}"
exec bash "$(dirname "$0")/session_zn.sh"
