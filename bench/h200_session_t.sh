#!/usr/bin/env bash
# Device session T on the lent H200 (nothing to carry: torch and Triton only). NOT RUN YET.
# 1. The attention input of one decode layer (add+RMSNorm, fused_qkv_a, q_a_layernorm + q_b_proj, kv_a norm)
#    stock vs tuned side by side with the final table's winners (bench/attn_block.py);
# 2. the MoE block with the final table's winners for all four of its kernels: sessions N and S ran some or
#    all of them with default configs (bench/results/2026-12-03-h200-summary.md, "Said plainly").
source "$(dirname "$0")/device_lib.sh"
R=${KT_WINNERS:-$(ls -t bench/results/*-h200-decode-tuning-r.json | head -n1)}
run timeout 150 python3 bench/attn_block.py --winners "$R" --batches 1,4,16 --out "$OUT"
run timeout 200 python3 bench/moe_block.py --batches 1,4,16,64 --winners "$R" --out "$OUT"
grep -E "^== |M= *[0-9]|rror" "$L" | tail -20
