#!/usr/bin/env bash
# Device call B of session 28 (carry .whl2 and .cutexz), on whichever card comes: the buckets no table has tuned,
# 5-8 and 17-32, which an exported package serves with the stock kernel (bench/plans/make_s28.py says how the plan
# picks its configs), then the decode layer at M = 8 and 32, where it has never run.
# - H100 (it ran in session 28: a call that carries table h100-s28's JSON does nothing there): plan s28_h100.json
#   resumed from h100-s27 in KT_H100_TUNING_S (330 s by default); the whole exported wheel
#   self-tested (90 s); the layer at M = 8, 32 in what is left of KT_CALL_S (550 s).
# - H200: plan s28_h200.json (those buckets, then all of s27_h200.json: the tiles at M = 64 and session 26's backlog)
#   resumed from the table of record (s25) in KT_TUNING_S (400 s by default); the layer at M = 8, 32, 64 in what is left.
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
if [ "$HW" = h200 ]; then
  export KT_PLAN=bench/plans/s28_h200.json KT_WHAT=decode-tuning-s28 KT_TUNING_S=${KT_TUNING_S:-400} \
    KT_RESUME_DB=bench/results/2026-12-06-h200-decode-tuning-s25.sqlite
  source "$(dirname "$0")/device_lib.sh"
  tune_then_layer_in_call 8,32,64 60
elif [ "$HW" = h100 ] && ls bench/results/*-h100-decode-tuning-h100-s28.json > /dev/null 2>&1; then
  echo "session 28 call B: its H100 part has run (table h100-s28 is here): nothing to do on this card"; exit 0
elif [ "$HW" = h100 ]; then
  export KT_PLAN=bench/plans/s28_h100.json KT_WHAT=decode-tuning-h100-s28 KT_TUNING_S=${KT_H100_TUNING_S:-330} \
    KT_RESUME_DB=bench/results/2026-12-07-h100-decode-tuning-h100-s27.sqlite
  source "$(dirname "$0")/device_lib.sh"
  # an empty slot list: the self-test runs every entry of the wheel
  tune_then_layer "" 8,32 $(( ${KT_CALL_S:-550} - KT_TUNING_S - 90 )) 90
else
  echo "session 28 call B: no plan for this card: $HW"; exit 0
fi
