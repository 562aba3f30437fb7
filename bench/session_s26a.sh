#!/usr/bin/env bash
# Device call A of session 26 (carry .whl2 and .cutexz), on whichever card comes (bench/plans/make_s26.py says what and
# why):
# - H200: what the H100 ran since table ZN and no H200 has (the shared expert's split-order kernel, the ring GEMV,
#   o_proj's GEMV with the residual and the norm, the mla_norms_gemm slot) and the grouped kernel's configs around
#   moe_experts_shared's one at M = 16 and 64, resumed from the table of record (s25); then, in what is left of the
#   600 s a command may take, the decode layer at M = 1, 2, 4. Call B (bench/session_s26b.sh) runs the self-test,
#   the attention block and the layer again from this call's table.
# - H100: the grouped configs and h100-s25's cancelled M = 4 runs of moe_experts_shared, resumed from h100-s25, then
#   the decode layer at M = 4 and 16.
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
if [ "$HW" = h200 ]; then
  export KT_PLAN=bench/plans/s26_h200.json KT_WHAT=decode-tuning-s26 KT_TUNING_S=${KT_TUNING_S:-460} \
    KT_RESUME_DB=bench/results/2026-12-06-h200-decode-tuning-s25.sqlite
  source "$(dirname "$0")/device_lib.sh"
  # the plan may end well before its deadline: the layer at M = 1, 2, 4 in what is left of the call
  tune_then_layer_in_call 1,2,4 90
elif [ "$HW" = h100 ]; then
  export KT_PLAN=bench/plans/s26_h100.json KT_WHAT=decode-tuning-h100-s26 KT_TUNING_S=${KT_TUNING_S:-300} \
    KT_RESUME_DB=bench/results/2026-12-06-h100-decode-tuning-h100-s25.sqlite
  source "$(dirname "$0")/device_lib.sh"  # tune_then_layer; h200_session_x.sh logs into the same run.log
  tune_then_layer "--slot moe_experts_shared" 4,16 200 0
else
  echo "session 26 call A: no plan for this card: $HW"; exit 0
fi
