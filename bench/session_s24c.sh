#!/usr/bin/env bash
# Third device call of session 24 (carry .whl2 and .cutexz). H100: the routed experts' incumbents at M = 1, 2, 4
# (bench/plans/s24c_h100.json), nine runs of 4 GB of expert weights on twelve workers at once, resumed from call B's
# table (h100-s24b): in calls A and B, 4 and 5 of them ran the card out of memory in their checks; now a check that
# runs out beside others runs again with the device to itself (workers/pipeline.py check_beside_others), and every
# chained form of moe_experts_gemv gets its race. No self-test, no layer: the call is short. On an H200 it is a short
# form of the first call (bench/session_s24.sh), which no H200 has run.
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
if [ "$HW" = h200 ]; then
  KT_TUNING_S=240 KT_SELFTEST_S=0 KT_LAYER_BATCHES=1,4 exec bash "$(dirname "$0")/session_s24.sh"
fi
if [ "$HW" != h100 ]; then echo "session 24 call C: no plan for this card: $HW"; exit 0; fi
export KT_PLAN=bench/plans/s24c_h100.json KT_WHAT=decode-tuning-h100-s24c KT_TUNING_S=${KT_TUNING_S:-150} \
  KT_RESUME_DB=bench/results/2026-12-06-h100-decode-tuning-h100-s24b.sqlite
KT_REQUIRE_HW=h100 KT_MOE_BATCHES=none KT_ATTN_BATCHES= KT_SELFTEST_S=0 bash "$(dirname "$0")/h200_session_x.sh"
