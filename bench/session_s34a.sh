#!/usr/bin/env bash
# Device call A of session 34 (carry .whl2, .cutexz and .tables from bench/pack_tables.sh on the s33 table), on an
# H200 only: bench/session_s29c.sh with plan s34_h200.json (the 32 items of s29_h200.json session 33's cut step did not
# finish: rmsnorm_gemm 33-64, which no H200 run has timed, and the backlog) resumed from the table of record (s33) in
# KT_TUNING_S (330 s), then the new table's wheel self-tested at every M in what is left of the call. On another card
# it does nothing.
KT_PLAN=bench/plans/s34_h200.json KT_WHAT=decode-tuning-s34 KT_TUNING_S=${KT_TUNING_S:-330} \
  KT_RESUME_DB=bench/results/2026-12-07-h200-decode-tuning-s33.sqlite exec bash "$(dirname "$0")/session_s29c.sh"
