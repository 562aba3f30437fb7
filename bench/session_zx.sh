#!/usr/bin/env bash
# Device session ZX (carry .whl2 and .cutexz; install line as in h200_session_v.sh), by the card in hand:
# - an H200: session ZU (table ZN with zs_all.json, the ring GEMV's H200 runs; session ZV's attention block with
#   the chained paths; the self-test, which checks the chained builds too);
# - an H100: its h100-zt table with chain_zx.json (the ring and K-split GEMV winners re-measured as the files are
#   now, so that the exported entries can be chained: the export ships the source each winner was measured with),
#   the attention block with the chained paths, and the export's dense self-test, chained builds included.
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
if [ "$HW" = h200 ]; then
  exec bash "$(dirname "$0")/session_zu.sh"
fi
export KT_PLAN=bench/plans/chain_zx.json KT_WHAT=decode-tuning-h100-zx KT_TUNING_S=${KT_TUNING_S:-150} \
  KT_RESUME_DB=bench/results/2026-12-06-h100-decode-tuning-h100-zt.sqlite KT_ATTN_BATCHES=${KT_ATTN_BATCHES-1,4,16} \
  KT_ATTN_TIMEOUT_S=${KT_ATTN_TIMEOUT_S:-160} KT_NCU_S=0 KT_SELFTEST_S=${KT_SELFTEST_S:-60}
exec bash "$(dirname "$0")/session_zn.sh"
