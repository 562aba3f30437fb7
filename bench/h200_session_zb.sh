#!/usr/bin/env bash
# Device session ZB on the lent H200 (carry .whl2 and .cutexz; install line as in h200_session_v.sh): session
# X's steps resumed from ZA's table for moe_experts_gemv (the routed experts at M <= 8 as two one-round-trip
# CUDA-core GEMV launches, PDL on/off): configs at M = 1, 2, 4 and a transfer search at M = 1; then the MoE
# block at batch 1, 2, 4 with that table's winners, and the table's export and self-test.
export KT_PLAN=bench/plans/h200_moe_gemv_zb.json KT_WHAT=decode-tuning-zb KT_MOE_BATCHES=1,2,4 \
  KT_RESUME_DB=bench/results/2026-12-04-h200-decode-tuning-za.sqlite KT_TUNING_S=${KT_TUNING_S:-200} \
  KT_SELFTEST_S=${KT_SELFTEST_S:-150}
exec bash "$(dirname "$0")/h200_session_x.sh"
