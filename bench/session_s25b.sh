#!/usr/bin/env bash
# Second device call of session 25 (carry .whl2 and .cutexz), short (the session had ~800 s of device time left):
# - H200: session 24's H200 plan (bench/plans/s24_h200.json: the mla_norms_gemm slot, o_proj's GEMV with the residual
#   and the norm, the chained files' incumbents), which no H200 had run, resumed from the first call's table (s25, which
#   extends ZN), for 200 s; then the decode layer at M = 1, 2, 4 with the table that results, so tuned_chain and the
#   shared-fused paths run where o_proj's GEMV takes its buckets;
# - H100: the first call's plan on the H100 (bench/plans/s25_h100.json), resumed from table h100-s24c, and the layer.
# No self-test (the first call's ran out of its 60 s inside the moe_experts_shared entry, which passed).
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
if [ "$HW" = h200 ]; then
  export KT_PLAN=bench/plans/s24_h200.json KT_WHAT=decode-tuning-s25b KT_TUNING_S=${KT_TUNING_S:-200} \
    KT_RESUME_DB=bench/results/2026-12-06-h200-decode-tuning-s25.sqlite
  SLOTS="--slot oproj_residual_norm"
elif [ "$HW" = h100 ]; then
  export KT_PLAN=bench/plans/s25_h100.json KT_WHAT=decode-tuning-h100-s25 KT_TUNING_S=${KT_TUNING_S:-200} \
    KT_RESUME_DB=bench/results/2026-12-06-h100-decode-tuning-h100-s24c.sqlite
  SLOTS="--slot moe_experts_shared"
else
  echo "session 25 call B: no plan for this card: $HW"; exit 0
fi
source "$(dirname "$0")/device_lib.sh"  # tune_then_layer; h200_session_x.sh logs into the same run.log
KT_SELFTEST_S=0 tune_then_layer "$SLOTS" 1,2,4 130 0
