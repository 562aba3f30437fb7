#!/usr/bin/env bash
# Device call A of session 29 (carry .whl2 and .cutexz), on whichever card comes: the buckets of the default batch
# sizes that the card's latest table holds no verdict for (bench/plans/make_s29.py reads them from its winners:
# bucket 2 of the dense GEMMs, add_rmsnorm, rmsnorm_gemm and o_proj's fused form, 33-64 of a few; on the H200 also
# 5-8 and 17-32, which session 28 filled on the H100 only), then the decode layer at the new M.
# - H100 (a call that carries table h100-s29's JSON does nothing there): plan s29_h100.json resumed from h100-s28 in
#   KT_H100_TUNING_S (240 s by default); the whole exported wheel self-tested (90 s); the layer at M = 1, 2 in what
#   is left of KT_CALL_S (550 s).
# - H200: plan s29_h200.json (those gaps, then session 27's backlog) resumed from the table of record (s25) in
#   KT_TUNING_S (400 s by default); the layer at M = 2, 8, 32 in what is left.
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
if [ "$HW" = h200 ]; then
  export KT_PLAN=bench/plans/s29_h200.json KT_WHAT=decode-tuning-s29 KT_TUNING_S=${KT_TUNING_S:-400} \
    KT_RESUME_DB=bench/results/2026-12-06-h200-decode-tuning-s25.sqlite
  source "$(dirname "$0")/device_lib.sh"
  tune_then_layer_in_call 2,8,32 60
elif [ "$HW" = h100 ] && ls bench/results/*-h100-decode-tuning-h100-s29.json > /dev/null 2>&1; then
  echo "session 29 call A: its H100 part has run (table h100-s29 is here): nothing to do on this card"; exit 0
elif [ "$HW" = h100 ]; then
  export KT_PLAN=bench/plans/s29_h100.json KT_WHAT=decode-tuning-h100-s29 KT_TUNING_S=${KT_H100_TUNING_S:-240} \
    KT_RESUME_DB=bench/results/2026-12-07-h100-decode-tuning-h100-s28.sqlite
  source "$(dirname "$0")/device_lib.sh"
  # an empty slot list: the self-test runs every entry of the wheel
  tune_then_layer "" 1,2 $(( ${KT_CALL_S:-550} - KT_TUNING_S - 90 )) 90
else
  echo "session 29 call A: no plan for this card: $HW"; exit 0
fi
