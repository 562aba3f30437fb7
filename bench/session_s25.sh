#!/usr/bin/env bash
# Device call of session 25 (carry .whl2 and .cutexz), on whichever card comes: the moe_experts_shared slot (the
# shared expert as the routed experts' 385th, picked by every token with weight 1; kernels/slots/moe_experts_shared.py)
# tuned through the service from each card's moe_experts incumbents (bench/plans/make_s25.py), resumed from that card's
# latest table; then the decode layer at M = 1, 2, 4, whose tuned_shared_fused and tuned_shared_fused_chain paths time
# the block with one router + experts pass beside tuned_best_oproj_norm and tuned_chain (which run the shared expert's
# own two launches on a side stream and add). Twelve workers on 26-38 runs of 4 GB of expert weights each also show
# the check's out-of-memory handling since its fix (workers/pipeline.py check_beside_others; call s24c: 4 of 9 lost).
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
if [ "$HW" = h200 ]; then
  export KT_PLAN=bench/plans/s25_h200.json KT_WHAT=decode-tuning-s25 \
    KT_RESUME_DB=bench/results/2026-12-06-h200-decode-tuning-zn.sqlite
elif [ "$HW" = h100 ]; then
  export KT_PLAN=bench/plans/s25_h100.json KT_WHAT=decode-tuning-h100-s25 \
    KT_RESUME_DB=bench/results/2026-12-06-h100-decode-tuning-h100-s24c.sqlite
else
  echo "session 25: no plan for this card: $HW"; exit 0
fi
export KT_TUNING_S=${KT_TUNING_S:-250}
source "$(dirname "$0")/device_lib.sh"  # tune_then_layer; h200_session_x.sh logs into the same run.log
tune_then_layer "--slot moe_experts_shared" "${KT_LAYER_BATCHES:-1,2,4}" 170 60
