#!/usr/bin/env bash
# Device session ZF on the lent H200 (carry .whl2 and .cutexz; install line as in h200_session_v.sh): session
# X's steps resumed from ZE's table for dense_gemm_gemv's KV=8 (in-register 8-element sums: M = 4 at M = 1's
# wide tiles) beside its KV=1 control in the same job (fused_qkv_a M = 1, 4, 16; q_b_proj and o_proj M = 4),
# and router_fused's two-level arrival (fused_tiles) over 168-1,344 CTA grids, tensor-core and CUDA-core,
# beside the table's M = 1 and M = 2-4 winner configs; then the MoE block at 1, 2, 4, export, self-test.
export KT_PLAN=bench/plans/h200_kv_tiles_zf.json KT_WHAT=decode-tuning-zf KT_MOE_BATCHES=1,2,4 \
  KT_RESUME_DB=bench/results/2026-12-04-h200-decode-tuning-ze.sqlite KT_TUNING_S=${KT_TUNING_S:-230} \
  KT_SELFTEST_S=${KT_SELFTEST_S:-200}
exec bash "$(dirname "$0")/h200_session_x.sh"
