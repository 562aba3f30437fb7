#!/usr/bin/env bash
# Device call D of session 21 (carry .whl2 and .cutexz): the decode layer but its attention kernel
# (bench/decode_layer.py: attention input, o_proj, MoE block in one graph), stock vs tuned, with the newest table of
# the card in hand. On an H200 first call B's H200 branch (the mla_norms_gemm slot through the service resumed from
# table ZN, the attention block, the slot's self-test), whose table the layer then runs; on an H100 the table of
# call C, and the attention block at M = 64 (call C's stopped there).
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
case "$HW" in
  h200) KT_TUNING_S=${KT_TUNING_S:-190} KT_ATTN_TIMEOUT_S=${KT_ATTN_TIMEOUT_S:-120} bash "$(dirname "$0")/session_s21b.sh"
        W=$(ls -t "$OUT"/*-decode-tuning-mla-s21b.json | head -n1); BATCHES=1,4,16
        mv "$OUT/run.log" "$OUT/run-mla.log" ;;  # device_lib.sh below starts run.log afresh
  h100) W=bench/results/2026-12-06-h100-decode-tuning-h100-mla-m64-s21c.json; BATCHES=1,4,16,64 ;;
  *) echo "no table for this card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"; exit 3 ;;
esac
source "$(dirname "$0")/device_lib.sh"
if [ "$HW" = h100 ]; then
  run timeout 100 python3 bench/attn_block.py --batches 64 --winners "$W" --out "$OUT"
fi
run timeout "${KT_LAYER_TIMEOUT_S:-140}" python3 bench/decode_layer.py --batches "$BATCHES" --winners "$W" --out "$OUT"
grep -E "^== |M= *[0-9]|rror" "$L" | tail -20
