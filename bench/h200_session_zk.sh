#!/usr/bin/env bash
# Device session ZK (carry .whl2 and .cutexz; install line as in h200_session_v.sh): session X's steps resumed
# from ZJ's table for the CuTe warp GEMV at M = 4 (o_proj, q_b_proj, fused_qkv_a; 27 runs), the
# attention input block with the new table's winners, then the export's self-test of every entry (ZJ's swap-AB
# winners were never self-tested); the MoE block has no dense slot. It needs the H200 the table was tuned on.
# Never run (no H200 came); superseded by bench/session_zl.sh, whose K-split GEMV at KWARPS = 1 does this warp GEMV's per-warp
# work (one warp, its rows, all of K) and whose H200 branch runs the same attention block and full self-test.
export KT_PLAN=bench/plans/h200_warp_gemv_zk.json KT_WHAT=decode-tuning-zk KT_MOE_BATCHES=none \
  KT_RESUME_DB=bench/results/2026-12-05-h200-decode-tuning-zj.sqlite KT_TUNING_S=${KT_TUNING_S:-200} \
  KT_ATTN_BATCHES=${KT_ATTN_BATCHES:-1,4,16} KT_SELFTEST_S=${KT_SELFTEST_S:-200} \
  KT_SELFTEST_ARGS=${KT_SELFTEST_ARGS:-} KT_REQUIRE_HW=${KT_REQUIRE_HW:-h200}
exec bash "$(dirname "$0")/h200_session_x.sh"
