#!/usr/bin/env bash
# Device session ZO (carry .whl2 and .cutexz; install line as in h200_session_v.sh), session ZN's script with other
# plans: on an H200, the fenced tensor-core GEMV's neighbours (bench/plans/make_mma_gemv_zo.py says why), resumed
# from table ZN, then the dense slots' self-test of the new export and Nsight Compute's counters of ZN's dense
# winners beside cuBLAS at the same shapes (bench/ncu_dense.py), within KT_NCU_S seconds. On an H100 it runs the
# rest of session ZN's H100 plan (q_b_proj M = 4 and 16, o_proj: its ZN call's deadline came after q_b_proj M = 1),
# resumed from that call's table.
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
T=kernels/variants/cute/dense_gemm_mma_gemv.py
K=kernels/variants/cute/dense_gemm_ksplit_gemv.py
case "$HW" in
  h100) export KT_PLAN=bench/plans/zn_h100_rest.json KT_WHAT=decode-tuning-h100-zn2 KT_NCU_S=0 \
          KT_RESUME_DB=bench/results/2026-12-06-h100-decode-tuning-h100-zn.sqlite KT_TUNING_S=${KT_TUNING_S:-240} ;;
  # ZN's winners where they beat cuBLAS (q_b_proj M = 4 and 16, o_proj M = 4, fused_qkv_a M = 4), its nearest miss
  # (o_proj M = 16), and the stock kernels beside them; no attention block unless KT_ATTN_BATCHES asks (device time)
  h200) export KT_PLAN=bench/plans/zo_fenced.json KT_WHAT=decode-tuning-zo KT_TUNING_S=${KT_TUNING_S:-170} \
          KT_RESUME_DB=bench/results/2026-12-06-h200-decode-tuning-zn.sqlite KT_ATTN_BATCHES=${KT_ATTN_BATCHES:-} \
          KT_SELFTEST_S=${KT_SELFTEST_S:-45} KT_NCU_S=${KT_NCU_S:-95} \
          KT_NCU_ITEMS="q_b_proj:16:$T:{\"WROWS\": 16, \"RT\": 1, \"KWARPS\": 8, \"UNROLL\": 6, \"FENCE\": 1}
q_b_proj:16:stock
o_proj:16:$T:{\"WROWS\": 16, \"RT\": 1, \"KWARPS\": 4, \"UNROLL\": 8, \"FENCE\": 1}
o_proj:16:stock
q_b_proj:4:$T:{\"WROWS\": 8, \"RT\": 1, \"KWARPS\": 4, \"UNROLL\": 12, \"FENCE\": 1}
q_b_proj:4:stock
o_proj:4:$T:{\"WROWS\": 8, \"RT\": 1, \"KWARPS\": 8, \"UNROLL\": 4, \"FENCE\": 1}
o_proj:4:stock
fused_qkv_a:4:$K:{\"ROWS\": 4, \"KWARPS\": 4, \"UNROLL\": 2}
fused_qkv_a:4:stock
fused_qkv_a:16:$T:{\"WROWS\": 16, \"RT\": 1, \"KWARPS\": 8, \"UNROLL\": 7, \"FENCE\": 1}" ;;
esac
exec bash "$(dirname "$0")/session_zn.sh"
