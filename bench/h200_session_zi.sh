#!/usr/bin/env bash
# Device session ZI on the lent H200 (carry .whl2 and .cutexz; install line as in h200_session_v.sh): session
# X's steps resumed from ZH's table for the router's epilogue as a programmatic dependent launch (PDL 0 and 1
# of ZH's separate winner configs, side by side in one job at M = 1-64; ZH's fused M = 1 config beside them)
# and a transfer search of the router at M = 1; then the MoE block at 1, 2, 4, 16, 64, export, self-test.
export KT_PLAN=bench/plans/h200_router_pdl_zi.json KT_WHAT=decode-tuning-zi KT_MOE_BATCHES=1,2,4,16,64 \
  KT_RESUME_DB=bench/results/2026-12-04-h200-decode-tuning-zh.sqlite KT_TUNING_S=${KT_TUNING_S:-200} \
  KT_MOE_TIMEOUT_S=${KT_MOE_TIMEOUT_S:-150} KT_SELFTEST_S=${KT_SELFTEST_S:-200}
exec bash "$(dirname "$0")/h200_session_x.sh"
