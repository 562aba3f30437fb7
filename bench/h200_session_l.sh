#!/usr/bin/env bash
# Device session L on the lent H200 (carry .whlp and install it as in h200_session_g.sh: latency_floor imports
# the harness, which needs pydantic, not on the device; on 2026-12-03 that step failed without it and was rerun with it):
# 1. bench/latency_floor.py: what one kernel can reach at each slot's weight size, timed as the harness
#    times a variant (empty kernel, one DRAM round trip, the fastest streaming read): the bound behind
#    issue 3's ">= 70% of the HBM floor at M=1" for the 4.7-15 MB GEMMs;
# 2. bench/moe_block.py with the winners of session K (--winners, default the newest all-slots file):
#    stock (torch loop, eager) vs stock_graph (torch gather+bmm, one graph) vs tuned vs tuned_side (the
#    shared expert on its own stream beside router + routed experts: the pair timed together).
source "$(dirname "$0")/device_lib.sh"
run timeout "${KT_FLOOR_S:-200}" python3 bench/latency_floor.py --out "$OUT"
W=${KT_WINNERS:-$(ls -t bench/results/*-h200-decode-tuning-all.json 2>/dev/null | head -n1)}
run timeout "${KT_MOE_S:-150}" python3 bench/moe_block.py --batches 1,4,16,64 ${W:+--winners "$W"}
grep -E "^== |wrote|floor|M= *[0-9]|rror" "$L" | tail -30
