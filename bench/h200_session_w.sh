#!/usr/bin/env bash
# Device session W on the lent H200 (carry .whl2 and .cutexz; install line as in h200_session_v.sh):
# session V again (its files did not survive the session that ran it), then a first GPU look at
# shared_expert_gemv: its configs at M = 1, 2, 4 beside shared_expert_fused's tuned configs and the stock
# MLP, through the worker's real evaluation (bench/pipeline_runs.py), so the next tuning plan knows
# which of its shapes are worth searching.
source "$(dirname "$0")/h200_session_v.sh"
pr 120 6 --what shared-expert-gemv-probe-w --variants kernels/variants/triton/shared_expert_gemv.py \
    --configs "$(cat bench/plans/shared_expert_gemv_probe_w.json)" --batches 1,2,4 --shapes shared_expert
grep -E "^== |rror" "$L" | tail -6
