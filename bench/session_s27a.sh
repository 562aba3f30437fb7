#!/usr/bin/env bash
# Device call A of session 27 (carry .whl2 and .cutexz), on whichever card comes (bench/plans/make_s27.py says what and
# why). Both cards first time moe_experts_grouped's ALIGN "tiles" beside "sort" at M = 64 (moe_experts_shared and
# moe_experts), then the decode layer at M = 64, where the fused MoE block lost to the pair by 9.8% on the H100:
# - H200: then everything of s26_h200.json (no H200 has run it), resumed from the table of record (s25), in
#   KT_TUNING_S (460 s by default); the layer at M = 64 in what is left of the 600 s a command may take. Call B
#   (bench/session_s26b.sh, which takes the newest H200 table) runs the self-test, the attention block and the layer.
# - H100: resumed from h100-s26; the exported wheel self-tested on both MoE slots; the layer at M = 64 and 16.
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
if [ "$HW" = h200 ]; then
  export KT_PLAN=bench/plans/s27_h200.json KT_WHAT=decode-tuning-s27 KT_TUNING_S=${KT_TUNING_S:-460} \
    KT_RESUME_DB=bench/results/2026-12-06-h200-decode-tuning-s25.sqlite
  source "$(dirname "$0")/device_lib.sh"
  tune_then_layer_in_call 64 60
elif [ "$HW" = h100 ]; then
  # its own variable: KT_TUNING_S sizes the H200's much longer plan
  export KT_PLAN=bench/plans/s27_h100.json KT_WHAT=decode-tuning-h100-s27 KT_TUNING_S=${KT_H100_TUNING_S:-170} \
    KT_RESUME_DB=bench/results/2026-12-06-h100-decode-tuning-h100-s26.sqlite
  source "$(dirname "$0")/device_lib.sh"  # tune_then_layer; h200_session_x.sh logs into the same run.log
  # the layer gets what is left of the call after the tuning (<= KT_TUNING_S) and the self-test (40 s)
  tune_then_layer "--slot moe_experts_shared --slot moe_experts" 64,16 $(( ${KT_CALL_S:-550} - KT_TUNING_S - 40 )) 40
else
  echo "session 27 call A: no plan for this card: $HW"; exit 0
fi
