#!/usr/bin/env bash
# Device call C of session 29 (carry .whl2 and .cutexz), on an H200 only: plan s29_h200.json (the buckets the table of
# record has no verdict for, then session 27's backlog) resumed from the table of record (s25) in KT_TUNING_S (300 s by
# default), then the new table's exported wheel self-tested at every M each entry's bucket serves (selftest_every_m) in
# what is left of KT_CALL_S (550 s). No decode layer: session_s29a.sh's H200 branch runs the layer instead of the
# every-M check. On another card it does nothing.
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
[ "$HW" = h200 ] || { echo "session 29 call C: H200 only; this card: $HW"; exit 0; }
# KT_PLAN, KT_WHAT and KT_RESUME_DB, when set, make it another session's (bench/session_s34a.sh)
export KT_PLAN=${KT_PLAN:-bench/plans/s29_h200.json} KT_WHAT=${KT_WHAT:-decode-tuning-s29} KT_TUNING_S=${KT_TUNING_S:-300} \
  KT_RESUME_DB=${KT_RESUME_DB:-bench/results/2026-12-06-h200-decode-tuning-s25.sqlite}
source "$(dirname "$0")/device_lib.sh"
tune_then_every_m
