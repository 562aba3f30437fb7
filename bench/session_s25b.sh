#!/usr/bin/env bash
# Second device call of session 25 (carry .whl2 and .cutexz), short (the session had ~600 s of device time left):
# - H200: o_proj's GEMV with the residual and the norm, which no H200 had run, with the H100's best configs at M = 1
#   and 2 (bench/plans/s25b_h200.json from make_s25.py), resumed from the first call's table (s25, which extends ZN);
#   then the decode layer at M = 1, 2, 4 with the table that results, so that the chain starts at o_proj where its
#   GEMV wins, and M = 2 has an o_proj + norm kernel (and so the chained and shared-fused paths);
# - H100: the first call's plan on the H100 (bench/plans/s25_h100.json), resumed from table h100-s24c, and the layer.
# No self-test (the first call's ran out of its 60 s inside the moe_experts_shared entry, which passed).
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
if [ "$HW" = h200 ]; then
  export KT_PLAN=bench/plans/s25b_h200.json KT_WHAT=decode-tuning-s25b KT_TUNING_S=${KT_TUNING_S:-120} \
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
