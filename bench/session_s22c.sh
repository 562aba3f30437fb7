#!/usr/bin/env bash
# Device call C of session 22 (carry .whl2 and .cutexz): the short form of calls A and B for a session with ~600 s of
# device time left, on an H200 only: the mla_norms_gemm slot through the service (bench/plans/mla_norms_s21.json, 55
# runs, each also timed beside its bucket's incumbent once one exists) resumed from table ZN, then with that table the
# attention input block, the slot's exported self-test and the decode layer at M = 1, 4, 16. The ring GEMV's H200
# runs (call A's other half) wait. On an H100 it does nothing (the H100 has all of it: tables s21b/s21c, s21g).
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
if [ "$HW" != h200 ]; then echo "session 22 call C: nothing to do on this card: $HW"; exit 0; fi
source "$(dirname "$0")/device_lib.sh"  # layer_after_tuning; h200_session_x.sh logs into the same run.log
KT_PLAN=bench/plans/mla_norms_s21.json KT_WHAT=decode-tuning-mla-s22c KT_TUNING_S=${KT_TUNING_S:-190} \
  KT_RESUME_DB=bench/results/2026-12-06-h200-decode-tuning-zn.sqlite KT_MOE_BATCHES=none KT_REQUIRE_HW=h200 \
  KT_ATTN_BATCHES=1,4,16 KT_ATTN_TIMEOUT_S=${KT_ATTN_TIMEOUT_S:-100} KT_SELFTEST_S=${KT_SELFTEST_S:-45} \
  KT_SELFTEST_ARGS="--slot mla_norms_gemm --rounds 10" bash "$(dirname "$0")/h200_session_x.sh"
layer_after_tuning decode-tuning-mla-s22c 1,4,16 150
grep -E "^== |M= *[0-9]|rror" "$L" | tail -20
