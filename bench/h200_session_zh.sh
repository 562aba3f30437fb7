#!/usr/bin/env bash
# Device session ZH on the lent H200 (carry .whl2 and .cutexz; install line as in h200_session_v.sh): session
# X's steps resumed from ZG's table for the bitonic router's warps (fused with a 4- or 8-warp GEMV at M = 1;
# separate with 4 or 8 epilogue warps at M = 1-64) beside ZG's winner configs, and a transfer search of the
# router at M = 1; then the MoE block at 1, 2, 4, 16, 64, export, self-test.
export KT_PLAN=bench/plans/h200_router_epiwarps_zh.json KT_WHAT=decode-tuning-zh KT_MOE_BATCHES=1,2,4,16,64 \
  KT_RESUME_DB=bench/results/2026-12-04-h200-decode-tuning-zg.sqlite KT_TUNING_S=${KT_TUNING_S:-200} \
  KT_MOE_TIMEOUT_S=${KT_MOE_TIMEOUT_S:-150} KT_SELFTEST_S=${KT_SELFTEST_S:-200}
exec bash "$(dirname "$0")/h200_session_x.sh"
