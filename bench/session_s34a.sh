#!/usr/bin/env bash
# Device call A of session 34 (carry .whl2, .cutexz and .tables from bench/pack_tables.sh on the s33 table), on an
# H200 only: plan s34_h200.json (the 32 items of s29_h200.json session 33's cut step did not finish: rmsnorm_gemm 33-64,
# which no H200 run has timed, and the backlog) resumed from the table of record (s33) in KT_TUNING_S (330 s), then the
# new table's wheel self-tested at every M in what is left of KT_CALL_S (550 s). On another card it does nothing.
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
[ "$HW" = h200 ] || { echo "session 34 call A: H200 only; this card: $HW"; exit 0; }
export KT_PLAN=bench/plans/s34_h200.json KT_WHAT=decode-tuning-s34 KT_TUNING_S=${KT_TUNING_S:-330} \
  KT_RESUME_DB=bench/results/2026-12-07-h200-decode-tuning-s33.sqlite
source "$(dirname "$0")/device_lib.sh"
tune_in_call
use_plan "$KT_PLAN"  # KT_SELFTEST_PATH: CuTe DSL and apache-tvm-ffi on the self-test's path
left=$(( ${KT_CALL_S:-550} - SECONDS ))
if [ "$left" -ge 60 ]; then selftest_every_m "$OUT" "$left"; else echo "== no time for the every-M self-test" >> "$L"; fi
rm -f "$OUT"/*.whl  # at most 8 files come back: the wheel is rebuilt from the DB by any export
grep -E "^== |geomean|rror" "$L" | tail -24
