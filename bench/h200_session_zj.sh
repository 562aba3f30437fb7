#!/usr/bin/env bash
# Device session ZJ (carry .whl2 and .cutexz; install line as in h200_session_v.sh): session X's steps resumed
# from ZI's table for the new swap-AB tensor-core GEMM (kernels/variants/triton/dense_gemm_swapab.py):
#  - its configs at o_proj, q_b_proj, fused_qkv_a and lm_head, M = 4, 16, 64 (pointer loads vs the bulk tensor
#    copy beside each other in one job), and the mma.sync split-K kernel at o_proj M = 4, 16 with the same
#    small-tile many-CTA shapes (only 2 of its configs had run there);
#  - the attention input block at 1, 4, 16 with the resulting table (fused_qkv_a's winners are in it).
# No slot of the MoE block changes, so it is not re-run; the self-test belongs to the call that exports last.
export KT_PLAN=bench/plans/h200_dense_swapab_zj.json KT_WHAT=decode-tuning-zj KT_MOE_BATCHES=none \
  KT_ATTN_BATCHES=1,4,16 KT_RESUME_DB=bench/results/2026-12-05-h200-decode-tuning-zi.sqlite \
  KT_TUNING_S=${KT_TUNING_S:-450} KT_SELFTEST_S=${KT_SELFTEST_S:-0}
exec bash "$(dirname "$0")/h200_session_x.sh"
