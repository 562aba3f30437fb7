#!/usr/bin/env bash
# Device session ZA on the lent H200 (carry .whl2 and .cutexz; install line as in h200_session_v.sh): session
# X's steps resumed from Z's table for moe_experts_grouped's PDL (each expert's w2 rows loaded while w13 runs),
# with and without it at the same tile shapes at M = 1, 2, 4 and a short transfer search at M = 1; then the MoE
# block at batch 1, 2, 4 and the final table's export and self-test.
export KT_PLAN=bench/plans/h200_moe_pdl_za.json KT_WHAT=decode-tuning-za KT_MOE_BATCHES=1,2,4 \
  KT_RESUME_DB=bench/results/2026-12-04-h200-decode-tuning-z.sqlite KT_TUNING_S=${KT_TUNING_S:-170} \
  KT_SELFTEST_S=${KT_SELFTEST_S:-150}
exec bash "$(dirname "$0")/h200_session_x.sh"
