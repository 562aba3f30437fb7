#!/usr/bin/env bash
# Device session ZG on the lent H200 (carry .whl2 and .cutexz; install line as in h200_session_v.sh): session
# X's steps resumed from ZF's table for router_fused's TOPK=bitonic (tl.topk's merge network over the packed
# keys) beside the table's pick-by-pick winner configs in the same job: fused at M = 1 (and 2), separate
# with one and four epilogue warps at M = 1, 2, 4, 16, 64; then the MoE block at 1, 2, 4, export, self-test.
export KT_PLAN=bench/plans/h200_router_bitonic_zg.json KT_WHAT=decode-tuning-zg KT_MOE_BATCHES=1,2,4 \
  KT_RESUME_DB=bench/results/2026-12-04-h200-decode-tuning-zf.sqlite KT_TUNING_S=${KT_TUNING_S:-200} \
  KT_SELFTEST_S=${KT_SELFTEST_S:-200}
exec bash "$(dirname "$0")/h200_session_x.sh"
