#!/usr/bin/env bash
# Device session ZV (carry .whl2 and .cutexz; install line as in h200_session_v.sh): the attention input block with
# its kernels chained by programmatic dependent launch (bench/attn_block.py's tuned_pdl and tuned_pdl_l2 paths,
# the seed system's weight prefetch), side by side with the same kernels launched plainly and with stock, on the
# card in hand:
# - an H200: session ZU first (table ZN with zs_all.json, the ring GEMV's H200 runs), whose attention block with
#   the new table runs the chained paths too, then the self-test;
# - an H100: no tuning (its ring plans all ran); the block with the H100's table (h100-zt: the ring GEMV at
#   fused_qkv_a M = 4 and 16) and with table ZN's winners (the K-split GEMV and the Triton split-K).
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
if [ "$HW" = h200 ]; then
  exec bash "$(dirname "$0")/session_zu.sh"
fi
source "$(dirname "$0")/device_lib.sh"
for table in h100-decode-tuning-h100-zt h200-decode-tuning-zn; do
  run timeout "${KT_ATTN_TIMEOUT_S:-160}" python3 bench/attn_block.py --batches "${KT_ATTN_BATCHES:-1,4,16}" \
    --winners "bench/results/2026-12-06-$table.json" --out "$OUT"
  mv "$OUT/attn_block.json" "$OUT/attn_block-$table.json"
done
grep -E "^== |M= *[0-9]|rror" "$L" | tail -20
