#!/usr/bin/env bash
# Device session S on the lent H200 (nothing to carry: torch and Triton only), the last minutes of the
# 2026-12-03 night budget: the q path (q_a_layernorm + q_b_proj) side by side in one run, four paths as CUDA
# graphs over rotating weights, with the fused kernel's configs from session R's winners; then the MoE block
# with R's winners (the final table) at M=1 and 16.
source "$(dirname "$0")/device_lib.sh"
R=${KT_WINNERS:-$(ls -t bench/results/*-h200-decode-tuning-r.json | head -n1)}
run timeout 90 python3 bench/q_norm_block.py --winners "$R" --batches 1,4,16 --out "$OUT"
run timeout 120 python3 bench/moe_block.py --batches 1,16 --winners "$R" --out "$OUT"
grep -E "^== |M= *[0-9]|rror" "$L" | tail -20
