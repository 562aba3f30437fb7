#!/usr/bin/env bash
# Device session Y on the lent H200 (carry .whl2 and .cutexz; install line as in h200_session_v.sh): session
# X's steps for the router's CUDA-core form (router_fused.py MATH=fma at M = 1, 2, 4, then a transfer search at
# M = 1), resumed from X's table; the self-test gets 180 s (X's 33 entries ran past 100).
export KT_PLAN=bench/plans/h200_router_fma_y.json KT_WHAT=decode-tuning-y \
  KT_RESUME_DB=bench/results/2026-12-04-h200-decode-tuning-x.sqlite KT_TUNING_S=${KT_TUNING_S:-220} \
  KT_SELFTEST_S=${KT_SELFTEST_S:-180}
exec bash "$(dirname "$0")/h200_session_x.sh"
