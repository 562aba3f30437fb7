#!/usr/bin/env bash
# Device session ZL (carry .whl2 and .cutexz; install line as in h200_session_v.sh): the CuTe K-split GEMV
# (bench/plans/make_ksplit_gemv_zl.py says why; 72 runs at M = 1 and 4 of fused_qkv_a, q_b_proj and o_proj)
# through the service, resumed from the table of the card in hand, so it extends that card's winners and
# nothing is keyed to the wrong hardware:
# - an H200: table ZJ (the table of record), then the attention input block and the self-test of every entry
#   of the new export (ZJ's swap-AB entries were never self-tested on an H200);
# - an H100: the H100's own table (h100a), then the attention block and the dense slots' self-test.
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
case "$HW" in
  h200) export KT_RESUME_DB=bench/results/2026-12-05-h200-decode-tuning-zj.sqlite KT_WHAT=decode-tuning-zl \
          KT_SELFTEST_S=${KT_SELFTEST_S:-200} KT_SELFTEST_ARGS=${KT_SELFTEST_ARGS:-} ;;
  h100) export KT_RESUME_DB=bench/results/2026-12-05-h100-decode-tuning-h100a.sqlite KT_WHAT=decode-tuning-h100-zl \
          KT_SELFTEST_S=${KT_SELFTEST_S:-120} KT_SELFTEST_ARGS=${KT_SELFTEST_ARGS:-"--slot dense_gemm --rounds 10"} ;;
  *) echo "no table to resume on this card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"; exit 3 ;;
esac
export KT_PLAN=bench/plans/ksplit_gemv_zl.json KT_MOE_BATCHES=none KT_REQUIRE_HW=$HW \
  KT_TUNING_S=${KT_TUNING_S:-250} KT_ATTN_BATCHES=${KT_ATTN_BATCHES:-1,4,16}
exec bash "$(dirname "$0")/h200_session_x.sh"
