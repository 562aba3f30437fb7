#!/usr/bin/env bash
# Second device call of session 24 (carry .whl2 and .cutexz), H100 only: the incumbents of o_proj's GEMV, the router
# and the routed experts at M = 1, 2, 4 again (bench/plans/s24b_h100.json), resumed from the first call's table
# (h100-s24), so that every chained form is checked in the service's race: in the first call four moe_experts runs
# ran out of the card's memory inside that check, since fixed (workers/chain.py keeps one set of inputs); the
# shared expert's new M = 3-64 winner (split-order partials, PDL) and two runners-up at M = 1 and 2; the exported
# entries of those slots self-tested (the chained builds too); then the decode layer at M = 1, 2, 4, 16, tuned_chain
# beside tuned_best_oproj_norm again.
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
if [ "$HW" = h200 ]; then exec bash "$(dirname "$0")/session_s24.sh"; fi
if [ "$HW" != h100 ]; then echo "session 24 call B: no plan for this card: $HW"; exit 0; fi
export KT_PLAN=bench/plans/s24b_h100.json KT_WHAT=decode-tuning-h100-s24b KT_TUNING_S=${KT_TUNING_S:-190} \
  KT_RESUME_DB=bench/results/2026-12-06-h100-decode-tuning-h100-s24.sqlite
source "$(dirname "$0")/device_lib.sh"  # tune_then_layer; h200_session_x.sh logs into the same run.log
tune_then_layer "--slot oproj_residual_norm --slot router --slot shared_expert --slot moe_experts" 1,2,4,16 200 120
