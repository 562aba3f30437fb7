#!/usr/bin/env bash
# Device call A of session 28 (carry .whl2 and .cutexz), on whichever card comes:
# - H200: session 27's call A as it stands (bench/session_s27a.sh: plan s27_h200.json resumed from the table of record,
#   s25, then the decode layer at M = 64); no H200 has run it yet.
# - H100: its tiles runs are in (table h100-s27, this session's first call); only the decode layer at M = 4 with that
#   table, the one batch of the layer's 1, 2, 4, 16, 64 it has not run, so that the call gives the card back soon.
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
if [ "$HW" = h200 ]; then
  exec bash "$(dirname "$0")/session_s27a.sh"
elif [ "$HW" = h100 ]; then
  source "$(dirname "$0")/device_lib.sh"
  W=$(ls -t bench/results/*-h100-decode-tuning-h100-s27.json | head -n1)
  run timeout 200 python3 bench/decode_layer.py --batches 4 --winners "$W" --out "$OUT"
  grep -E "^== |M= *[0-9]|rror" "$L" | tail -8
else
  echo "session 28 call A: no plan for this card: $HW"; exit 0
fi
