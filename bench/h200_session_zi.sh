#!/usr/bin/env bash
# Device session ZI on the lent H200 (carry .whl2 and .cutexz; install line as in h200_session_v.sh): session
# X's steps resumed from ZH's table for two new options, each beside its control in the same job:
#  - L2_PF (w2 prefetched into L2 while w13 / gate-up run) on ZH's moe_experts_gemv winners at M = 1, 2, 4 and
#    a 28-split M = 1 config, and on the shared_expert_gemv winners at M = 1, 2, 4;
#  - PDL for the router's separate epilogue on ZH's winner configs at M = 1-64 (ZH's fused M = 1 config beside
#    them), then a transfer search of the router at M = 1;
# then the MoE block at 1, 2, 4, 16, 64 with the resulting table, export, self-test.
# Ran once, at 71524fa (bench/results/2026-12-05-h200-*-zi.*). L2_PF lost and left both spaces after it (42ae79b):
# a re-run today submits only the plan's L2_PF 0 configs (the API drops configs outside a variant's space).
export KT_PLAN=bench/plans/h200_router_pdl_zi.json KT_WHAT=decode-tuning-zi KT_MOE_BATCHES=1,2,4,16,64 \
  KT_RESUME_DB=bench/results/2026-12-04-h200-decode-tuning-zh.sqlite KT_TUNING_S=${KT_TUNING_S:-240} \
  KT_MOE_TIMEOUT_S=${KT_MOE_TIMEOUT_S:-150} KT_SELFTEST_S=${KT_SELFTEST_S:-180}
exec bash "$(dirname "$0")/h200_session_x.sh"
