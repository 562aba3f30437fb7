#!/usr/bin/env bash
# Device call of session 23 (carry .whl2 and .cutexz), on whichever card comes: the new oproj_residual_norm_gemv
# (o_proj GEMV with the residual add in its epilogue, the RMSNorm a PDL-chained second launch) through the
# service at M = 1, 2, 4 (bench/plans/make_s23.py), each run beside its bucket's incumbent; the exported slot
# self-tested; then the decode layer with the new table, whose tuned_best_oproj_norm path replaces o_proj and the
# MoE block's add + RMSNorm with the slot's winner.
# - H200: resumed from table ZN (the table of record), with the mla_norms_gemm slot, which no H200 has run
#   (bench/plans/s23_h200.json); the layer at M = 1 and 4.
# - H100: resumed from the H100's latest table (rerank-s22a); the layer at M = 1, 2, 4.
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
if [ "$HW" = h200 ]; then
  export KT_PLAN=bench/plans/s23_h200.json KT_WHAT=decode-tuning-s23 KT_TUNING_S=${KT_TUNING_S:-330} \
    KT_RESUME_DB=bench/results/2026-12-06-h200-decode-tuning-zn.sqlite
  SLOTS="--slot oproj_residual_norm --slot mla_norms_gemm"; LAYER=1,4
elif [ "$HW" = h100 ]; then
  export KT_PLAN=bench/plans/oproj_norm_s23.json KT_WHAT=decode-tuning-h100-s23 KT_TUNING_S=${KT_TUNING_S:-210} \
    KT_RESUME_DB=bench/results/2026-12-06-h100-decode-tuning-h100-rerank-s22a.sqlite
  SLOTS="--slot oproj_residual_norm"; LAYER=1,2,4
else
  echo "session 23: no plan for this card: $HW"; exit 0
fi
source "$(dirname "$0")/device_lib.sh"  # tune_then_layer; h200_session_x.sh logs into the same run.log
tune_then_layer "$SLOTS" "$LAYER" 150 45
