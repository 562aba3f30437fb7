#!/usr/bin/env bash
# Device session ZC on the lent H200 (carry .whl2 and .cutexz; install line as in h200_session_v.sh): session
# X's steps resumed from ZB's table for router_fused's top-k by packed keys (one reduction per pick) and its
# EPI_WARPS (a one-warp separate epilogue): configs at M = 1, 2, 4, 16, 64 and a transfer search at M = 1; a
# second transfer search for moe_experts_gemv at M = 1; then the MoE block at batch 1, 2, 4 and the export.
export KT_PLAN=bench/plans/h200_router_topk_zc.json KT_WHAT=decode-tuning-zc KT_MOE_BATCHES=1,2,4 \
  KT_RESUME_DB=bench/results/2026-12-04-h200-decode-tuning-zb.sqlite KT_TUNING_S=${KT_TUNING_S:-230} \
  KT_SELFTEST_S=${KT_SELFTEST_S:-150}
exec bash "$(dirname "$0")/h200_session_x.sh"
