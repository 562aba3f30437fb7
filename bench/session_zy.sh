#!/usr/bin/env bash
# Device session ZY (carry .whl2 and .cutexz; install line as in h200_session_v.sh), by the card in hand:
# - an H200: session ZU (table ZN with zs_all.json, the ring GEMV's H200 runs; the attention block with the chained
#   paths; the self-test);
# - an H100: bench/chain_check.py over chain_zx.json (the H100 table's ring and K-split GEMV winners): each
#   chained build (levels 1 and 2) against its plain build behind a producer that writes its x, bit for bit, and
#   the pair's time plain vs chained.
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
if [ "$HW" = h200 ]; then
  exec bash "$(dirname "$0")/session_zu.sh"
fi
source "$(dirname "$0")/device_lib.sh"
run timeout "${KT_CHAIN_S:-300}" python3 bench/chain_check.py --plan bench/plans/chain_zx.json --out "$OUT"
grep -E "^== |M=|rror" "$L" | tail -30
