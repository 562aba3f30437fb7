#!/usr/bin/env bash
# Device call B of session 21 (carry .whl2 and .cutexz): the mla_norms_gemm slot through the service
# (bench/plans/mla_norms_s21.json: rmsnorm_gemm_fused.py with the kv latent's norm in its launch, at the rmsnorm_gemm
# winners' configs and four 64-row tiles for M = 64, beside the torch variant's two norms), resumed from the table
# of the card in hand (H200: table ZN; H100: table ZX); then the attention input block with the new table
# (tuned vs tuned_kv_apart, plain and chained) and the self-test of the new slot's export.
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
case "$HW" in
  h200) export KT_WHAT=decode-tuning-mla-s21b KT_RESUME_DB=bench/results/2026-12-06-h200-decode-tuning-zn.sqlite ;;
  h100) export KT_WHAT=decode-tuning-h100-mla-s21b KT_RESUME_DB=bench/results/2026-12-06-h100-decode-tuning-h100-zx.sqlite ;;
  *) echo "no table to resume on this card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"; exit 3 ;;
esac
export KT_PLAN=bench/plans/mla_norms_s21.json KT_TUNING_S=${KT_TUNING_S:-230} KT_MOE_BATCHES=none KT_REQUIRE_HW=$HW \
  KT_ATTN_BATCHES=${KT_ATTN_BATCHES-1,4,16} KT_ATTN_TIMEOUT_S=${KT_ATTN_TIMEOUT_S:-170} KT_SELFTEST_S=${KT_SELFTEST_S:-60} \
  KT_SELFTEST_ARGS=${KT_SELFTEST_ARGS:-"--slot mla_norms_gemm --rounds 10"}
exec bash "$(dirname "$0")/h200_session_x.sh"
