#!/usr/bin/env bash
# Device call H of session 21 (carry .whl2 and .cutexz): the chained trial's negative control on a SECOND activation
# (tests/cheats/chained_reads_second_early.py: an mla_norms_gemm kernel whose chained build reads x after
# griddepcontrol.wait but the kv latent before it) through the worker's evaluation at the K2 shape, M = 1 and 4: it
# must end check_failed / chained_mismatch with its plain trials passing. On an H200, then call B's H200 branch
# kept short (the mla_norms_gemm slot through the service resumed from table ZN, the attention block, the self-test).
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
source "$(dirname "$0")/device_lib.sh"
NEG=/tmp/kt_neg/triton/mla_norms_gemm_chained_reads_second_early.py
mkdir -p "$(dirname "$NEG")" && cp tests/cheats/chained_reads_second_early.py "$NEG"
pr 150 2 --what chain-negative-kv --hardware "$HW" --slot mla_norms_gemm --variants "$NEG" --configs default --batches 1,4
if [ "$HW" = h200 ]; then
  mv "$L" "$OUT/run-chain-negative-kv.log"
  KT_TUNING_S=${KT_TUNING_S:-150} KT_ATTN_TIMEOUT_S=${KT_ATTN_TIMEOUT_S:-100} KT_SELFTEST_S=${KT_SELFTEST_S:-40} \
    exec bash "$(dirname "$0")/session_s21b.sh"
fi
grep -E "^== |verdict|passed|failed|rror" "$L" | tail -20
