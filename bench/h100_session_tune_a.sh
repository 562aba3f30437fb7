#!/usr/bin/env bash
# Device session on a lent H100 (carry .whl2 and .cutexz; install line as in h200_session_v.sh): session X's steps
# resumed from the H100 port's DB (2026-12-05-h100-decode-port-zj.sqlite) with transfer searches of the dense GEMMs
# and the shared expert on the H100 (bench/plans/make_h100_dense_search_a.py says why); the attention input block
# with the new H100 table, and the self-test of the slots the searches touch. H100 figures only.
export KT_PLAN=bench/plans/h100_dense_search_a.json KT_WHAT=decode-tuning-h100a KT_MOE_BATCHES=none \
  KT_RESUME_DB=bench/results/2026-12-05-h100-decode-port-zj.sqlite KT_TUNING_S=${KT_TUNING_S:-250} \
  KT_ATTN_BATCHES=${KT_ATTN_BATCHES:-1,4,16} KT_SELFTEST_S=${KT_SELFTEST_S:-120} \
  KT_SELFTEST_ARGS=${KT_SELFTEST_ARGS:-"--slot dense_gemm --slot shared_expert --rounds 10"} KT_REQUIRE_HW=h100
exec bash "$(dirname "$0")/h200_session_x.sh"
