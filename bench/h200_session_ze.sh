#!/usr/bin/env bash
# Device session ZE on the lent H200 (carry .whl2 and .cutexz; install line as in h200_session_v.sh): session
# X's steps resumed from ZD's table for moe_experts_gemv's one-split w13 (a whole K row pair per CTA: no
# partials, counter or fence; allowed by the relaxed 512-bytes-a-thread rule) beside the control config in
# the same job at M = 1, 2, 4; a transfer search of the router at M = 1; then the MoE block, export, self-test.
export KT_PLAN=bench/plans/h200_moe_nosplit_ze.json KT_WHAT=decode-tuning-ze KT_MOE_BATCHES=1,2,4 \
  KT_RESUME_DB=bench/results/2026-12-04-h200-decode-tuning-zd.sqlite KT_TUNING_S=${KT_TUNING_S:-150} \
  KT_SELFTEST_S=${KT_SELFTEST_S:-220}
exec bash "$(dirname "$0")/h200_session_x.sh"
