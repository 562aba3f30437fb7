#!/usr/bin/env bash
# Device call A of session 21 (carry .whl2 and .cutexz): on an H200, session ZU (ring GEMV plans resumed from table
# ZN, the attention block with its chained paths, the self-test: about 560 s, so nothing else fits the call); on an
# H100, session ZZ's H100 share (~110 s): the chained trial's negative control and the K-split / ring winner configs,
# now with the producer that writes up to four activations in one launch (a3eb239), which no GPU has run yet.
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
if [ "$HW" = h200 ]; then exec bash "$(dirname "$0")/session_zu.sh"; fi
exec bash "$(dirname "$0")/session_zz.sh"
