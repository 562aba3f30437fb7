#!/usr/bin/env bash
# Device call C of session 21 (carry .whl2 and .cutexz): on an H200, call B's H200 branch (the mla_norms_gemm slot
# through the service resumed from table ZN, the attention block, the self-test); on an H100, whose 33-64 bucket of
# that slot ran at 13% of the HBM floor in call B, 32- and 64-row tiles with wider N tiles (fewer re-reads of the
# activations) at M = 32 and 64, resumed from call B's H100 table, and the attention block at M = 64.
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
if [ "$HW" = h200 ]; then exec bash "$(dirname "$0")/session_s21b.sh"; fi
export KT_PLAN=bench/plans/mla_norms_m64_s21c.json KT_WHAT=decode-tuning-h100-mla-m64-s21c \
  KT_RESUME_DB=bench/results/2026-12-06-h100-decode-tuning-h100-mla-s21b.sqlite KT_TUNING_S=${KT_TUNING_S:-170} \
  KT_MOE_BATCHES=none KT_REQUIRE_HW=h100 KT_ATTN_BATCHES=${KT_ATTN_BATCHES-64} KT_ATTN_TIMEOUT_S=${KT_ATTN_TIMEOUT_S:-90} \
  KT_SELFTEST_S=0
exec bash "$(dirname "$0")/h200_session_x.sh"
