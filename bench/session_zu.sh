#!/usr/bin/env bash
# Device session ZU (carry .whl2 and .cutexz; install line as in h200_session_v.sh): the H200 share of session ZT:
# zs_all.json resumed from table ZN within KT_TUNING_S, the attention block with the new table (its chained paths
# too), then the self-test of the new export; on an H100, which has run all of the ring GEMV's plans, nothing.
# Sessions ZV-ZZ run it on an H200 (about 560 s of device time with these defaults).
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
if [ "$HW" != h200 ]; then echo "session ZU: a $HW; its ring GEMV plans all ran (sessions ZP-ZT), nothing to do"; exit 0; fi
export KT_PLAN=bench/plans/zs_all.json KT_WHAT=decode-tuning-zu KT_TUNING_S=${KT_TUNING_S:-270} KT_NCU_S=0 \
  KT_RESUME_DB=bench/results/2026-12-06-h200-decode-tuning-zn.sqlite KT_ATTN_BATCHES=${KT_ATTN_BATCHES-1,4,16} \
  KT_ATTN_TIMEOUT_S=${KT_ATTN_TIMEOUT_S:-160} KT_SELFTEST_S=${KT_SELFTEST_S:-45}
exec bash "$(dirname "$0")/session_zn.sh"
