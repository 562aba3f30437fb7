#!/usr/bin/env bash
# Device call B of session 29 (carry .whl2 and .cutexz): the exported package of the card's latest table (as carried in
# bench/results/: s29, else s28) self-tested at EVERY batch size each entry's bucket serves (selftest --every-m), not only
# at the M its runs measured: dispatch runs a bucket's winner at all of the bucket's M (the M = 8 winner at M = 5-7),
# and nothing had checked those. Untimed at the extra M; the measured M are timed as in any self-test (3 rounds).
# KT_SELFTEST_S (480 by default) bounds it; each entry prints as it finishes, so a cut run still shows what it checked.
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
source "$(dirname "$0")/device_lib.sh"  # first_of, and the log under $OUT
if [ "$HW" = h200 ]; then
  W=$(first_of bench/results/*-h200-decode-tuning-s29.json bench/results/*-h200-decode-tuning-s28.json \
      bench/results/*-h200-decode-tuning-s25.json)
elif [ "$HW" = h100 ]; then
  W=$(first_of bench/results/*-h100-decode-tuning-h100-s30.json bench/results/*-h100-decode-tuning-h100-s29.json bench/results/*-h100-decode-tuning-h100-s28.json)
else
  echo "session 29 call B: no plan for this card: $HW"; exit 0
fi
export KT_LOG_FORMAT=plain
carried_table "$W"
export_table "$W" export-s29b /tmp/s29b-export
selftest_every_m /tmp/s29b-export "${KT_SELFTEST_S:-480}"
grep -E "^== " "$L" | tail -6
