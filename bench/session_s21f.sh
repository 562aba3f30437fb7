#!/usr/bin/env bash
# Device call F of session 21 (carry .whl2 and .cutexz): call E's decode layer ran past its 140 s at M = 64 and, then
# writing its file only at the end, left none (decode_layer.py now writes it after every batch size). On an H100:
# the layer again at M = 1, 4, 16, 64 with 230 s. On an H200: call B's H200 branch kept short (the mla_norms_gemm
# slot through the service resumed from table ZN, the attention block, the self-test), then the layer with its table.
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
case "$HW" in
  h200) KT_TUNING_S=${KT_TUNING_S:-180} KT_ATTN_TIMEOUT_S=${KT_ATTN_TIMEOUT_S:-100} KT_SELFTEST_S=${KT_SELFTEST_S:-40} \
          bash "$(dirname "$0")/session_s21b.sh"
        W=$(ls -t "$OUT"/*-decode-tuning-mla-s21b.json | head -n1); BATCHES=1,4,16; T=${KT_LAYER_TIMEOUT_S:-150}
        mv "$OUT/run.log" "$OUT/run-mla.log" ;;  # device_lib.sh below starts run.log afresh
  h100) W=bench/results/2026-12-06-h100-decode-tuning-h100-mla-m64-s21c.json; BATCHES=1,4,16,64; T=${KT_LAYER_TIMEOUT_S:-230} ;;
  *) echo "no table for this card: $(nvidia-smi --query-gpu=name --format=csv,noheader)"; exit 3 ;;
esac
source "$(dirname "$0")/device_lib.sh"
run timeout "$T" python3 bench/decode_layer.py --batches "$BATCHES" --winners "$W" --out "$OUT"
grep -E "^== |M= *[0-9]|rror" "$L" | tail -20
