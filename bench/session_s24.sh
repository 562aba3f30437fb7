#!/usr/bin/env bash
# Device call of session 24 (carry .whl2 and .cutexz), on whichever card comes. New here: o_proj's GEMV, the router
# and the routed experts as links of one chain of programmatic dependent launches (build(..., pdl=1); the router's
# GEMV fetches its first W tile while o_proj's norm runs, w13 launches during the router's epilogue). The service
# checks those chained forms in its race only where a job runs the files, so both plans (bench/plans/make_s24.py)
# carry the incumbents' own configs of the three files at M = 1, 2, 4 beside what that card still had to run;
# then the decode layer with the new table, whose tuned_chain path times the chain beside tuned_best_oproj_norm.
# - H100: session 23's call B (the fused kernels' REDUCE / PDL options at M = 4, 16, 64), resumed from table h100-s23;
#   the layer at M = 1, 2, 4.
# - H200: session 23's H200 call (the mla_norms_gemm slot and the o_proj GEMV at M = 1, 2, 4), resumed from table ZN;
#   the layer at M = 1, 2, 4.
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
if [ "$HW" = h200 ]; then
  export KT_PLAN=bench/plans/s24_h200.json KT_WHAT=decode-tuning-s24 KT_TUNING_S=${KT_TUNING_S:-330} \
    KT_RESUME_DB=bench/results/2026-12-06-h200-decode-tuning-zn.sqlite
  SLOTS="--slot oproj_residual_norm --slot mla_norms_gemm --slot router --slot moe_experts"
elif [ "$HW" = h100 ]; then
  export KT_PLAN=bench/plans/s24_h100.json KT_WHAT=decode-tuning-h100-s24 KT_TUNING_S=${KT_TUNING_S:-260} \
    KT_RESUME_DB=bench/results/2026-12-06-h100-decode-tuning-h100-s23.sqlite
  SLOTS="--slot shared_expert --slot oproj_residual_norm --slot router --slot moe_experts"
else
  echo "session 24: no plan for this card: $HW"; exit 0
fi
source "$(dirname "$0")/device_lib.sh"  # tune_then_layer; h200_session_x.sh logs into the same run.log
tune_then_layer "$SLOTS" "${KT_LAYER_BATCHES:-1,2,4}" 150 50
