#!/usr/bin/env bash
# Device call C of session 29 (carry .whl2 and .cutexz), on an H200 only: plan s29_h200.json (the buckets the table of
# record has no verdict for, then session 27's backlog) resumed from the table of record (s25) in KT_TUNING_S (300 s by
# default), then the new table's exported wheel self-tested at every M each entry's bucket serves (selftest_every_m) in
# what is left of KT_CALL_S (550 s). No decode layer: session_s29a.sh's H200 branch runs the layer instead of the
# every-M check. On another card it does nothing.
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
[ "$HW" = h200 ] || { echo "session 29 call C: H200 only; this card: $HW"; exit 0; }
export KT_PLAN=bench/plans/s29_h200.json KT_WHAT=decode-tuning-s29 KT_TUNING_S=${KT_TUNING_S:-300} \
  KT_RESUME_DB=bench/results/2026-12-06-h200-decode-tuning-s25.sqlite
source "$(dirname "$0")/device_lib.sh"
tune_in_call
use_plan "$KT_PLAN"  # here too, for KT_SELFTEST_PATH: CuTe DSL on the self-test's path (the CuTe entries need it)
left=$(( ${KT_CALL_S:-550} - SECONDS ))
if [ "$left" -ge 60 ]; then selftest_every_m "$OUT" "$left"; else echo "== no time for the every-M self-test" >> "$L"; fi
rm -f "$OUT"/*.whl  # at most 8 files come back: the wheel is rebuilt from the DB by any export
grep -E "^== |geomean|rror" "$L" | tail -24
