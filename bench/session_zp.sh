#!/usr/bin/env bash
# Device session ZP (carry .whl2 and .cutexz; install line as in h200_session_v.sh), session ZN's script with other
# plans: the ring GEMV (kernels/variants/cute/dense_gemm_ring_gemv.py: W streamed through a per-thread cp.async ring
# in shared memory; bench/plans/make_ring_gemv_zp.py says why and what runs), through the service, resumed from
# the table of the card in hand:
# - an H200: table ZN (the table of record) with zp_all.json: the ring GEMV's 70 runs, then session ZO's 36 fenced
#   neighbours (never run); then the attention input block with the new winners, the dense slots' self-test of the
#   new export, and Nsight Compute's counters of ring configs beside cuBLAS (bench/ncu_dense.py);
# - an H100: its session ZN table with the ring GEMV's 70 runs.
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
R=kernels/variants/cute/dense_gemm_ring_gemv.py
case "$HW" in
  h100) export KT_PLAN=bench/plans/ring_gemv_zp.json KT_WHAT=decode-tuning-h100-zp KT_NCU_S=0 KT_ATTN_BATCHES= \
          KT_RESUME_DB=bench/results/2026-12-06-h100-decode-tuning-h100-zn.sqlite KT_TUNING_S=${KT_TUNING_S:-240} ;;
  h200) export KT_PLAN=bench/plans/zp_all.json KT_WHAT=decode-tuning-zp KT_TUNING_S=${KT_TUNING_S:-300} \
          KT_RESUME_DB=bench/results/2026-12-06-h200-decode-tuning-zn.sqlite KT_ATTN_BATCHES=${KT_ATTN_BATCHES-1,4,16} \
          KT_SELFTEST_S=${KT_SELFTEST_S:-50} KT_NCU_S=${KT_NCU_S:-90} \
          KT_NCU_ITEMS="fused_qkv_a:16:$R:{\"WROWS\": 16, \"RT\": 1, \"KWARPS\": 8, \"STAGES\": 8, \"XRING\": 1}
fused_qkv_a:4:$R:{\"WROWS\": 8, \"RT\": 1, \"KWARPS\": 8, \"STAGES\": 8, \"XRING\": 1}
fused_qkv_a:4:stock
o_proj:16:$R:{\"WROWS\": 16, \"RT\": 1, \"KWARPS\": 2, \"STAGES\": 8, \"XRING\": 1}
o_proj:16:stock
q_b_proj:16:$R:{\"WROWS\": 8, \"RT\": 1, \"KWARPS\": 4, \"STAGES\": 6, \"XRING\": 1}
q_b_proj:16:stock" ;;
esac
exec bash "$(dirname "$0")/session_zn.sh"
