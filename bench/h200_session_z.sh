#!/usr/bin/env bash
# Device session Z on the lent H200 (carry .whl2 and .cutexz; install line as in h200_session_v.sh): session
# X's steps resumed from Y's table for the batch-2 bucket that X and Y opened: the tensor-core router and the
# tl.dot shared expert at M = 2 (X and Y measured only their CUDA-core forms there), then the MoE block at
# batch 1, 2, 4 and the final table's export and self-test.
export KT_PLAN=bench/plans/h200_bucket2_z.json KT_WHAT=decode-tuning-z KT_MOE_BATCHES=1,2,4 \
  KT_RESUME_DB=bench/results/2026-12-04-h200-decode-tuning-y.sqlite KT_TUNING_S=${KT_TUNING_S:-180} \
  KT_SELFTEST_S=${KT_SELFTEST_S:-180}
exec bash "$(dirname "$0")/h200_session_x.sh"
