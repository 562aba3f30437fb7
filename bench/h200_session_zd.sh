#!/usr/bin/env bash
# Device session ZD on the lent H200 (carry .whl2 and .cutexz; install line as in h200_session_v.sh): session
# X's steps resumed from ZC's table for router_fused's epilogue reading the logits with plain L2 loads (it was
# one acq_rel atomic_xchg per element), fused and separate, EPI_WARPS 1 and 4, at M = 1, 2, 4, 16, 64; the
# three best moe_experts_gemv configs at M = 1 again (their spread across jobs); then the MoE block at batch
# 1, 2, 4, the export and its self-test.
export KT_PLAN=bench/plans/h200_router_cg_zd.json KT_WHAT=decode-tuning-zd KT_MOE_BATCHES=1,2,4 \
  KT_RESUME_DB=bench/results/2026-12-04-h200-decode-tuning-zc.sqlite KT_TUNING_S=${KT_TUNING_S:-170} \
  KT_SELFTEST_S=${KT_SELFTEST_S:-240}
exec bash "$(dirname "$0")/h200_session_x.sh"
