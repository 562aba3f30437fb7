#!/usr/bin/env bash
# Second device call of session 23 (carry .whl2 and .cutexz). On an H100: the new options of the tensor-core
# kernels that hold the shared expert's and oproj_residual_norm's buckets from M = 3 up (bench/plans/make_s23.py:
# split-order partials and a PDL-prefetched w2 in shared_expert_fused, a PDL-chained norm in
# oproj_residual_norm_fused) through the service at M = 4, 16, 64, each run beside its bucket's incumbent, resumed
# from the first call's table (h100-s23); both slots' exported entries self-tested; the decode layer with the new
# table at M = 1, 4, 16. On an H200 it is the first call (bench/session_s23.sh), which no H200 has run.
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
if [ "$HW" = h200 ]; then exec bash "$(dirname "$0")/session_s23.sh"; fi
if [ "$HW" != h100 ]; then echo "session 23 call B: no plan for this card: $HW"; exit 0; fi
export KT_PLAN=bench/plans/s23b_fused_pdl.json KT_WHAT=decode-tuning-h100-s23b KT_TUNING_S=${KT_TUNING_S:-200} \
  KT_RESUME_DB=bench/results/2026-12-06-h100-decode-tuning-h100-s23.sqlite
source "$(dirname "$0")/device_lib.sh"  # tune_then_layer; h200_session_x.sh logs into the same run.log
tune_then_layer "--slot shared_expert --slot oproj_residual_norm" 1,4,16 170 45
