#!/usr/bin/env bash
# Device session ZK, prepared and NOT run yet (no device came for it on 2026-12-05; carry .whl2 and .cutexz; install line as in h200_session_v.sh): session X's steps resumed
# from ZJ's table for the CuTe warp GEMV at M = 4 and 16 (o_proj, q_b_proj, fused_qkv_a), then the export's
# self-test of its dense_gemm entries (ZJ's swap-AB winners are new in it); the MoE block has no dense slot.
export KT_PLAN=bench/plans/h200_warp_gemv_zk.json KT_WHAT=decode-tuning-zk KT_MOE_BATCHES=none \
  KT_RESUME_DB=bench/results/2026-12-05-h200-decode-tuning-zj.sqlite KT_TUNING_S=${KT_TUNING_S:-200} \
  KT_SELFTEST_S=${KT_SELFTEST_S:-60} KT_SELFTEST_ARGS="--slot dense_gemm --rounds 5"
exec bash "$(dirname "$0")/h200_session_x.sh"
