#!/usr/bin/env bash
# Device session ZZ (carry .whl2 and .cutexz; install line as in h200_session_v.sh): the check stage's chained trial
# (workers/chain.py) on the GPU, through the worker's own evaluation (bench/pipeline_runs.py), by the card in hand:
# - the negative control tests/cheats/chained_reads_early.py (its chained build reads x before griddepcontrol.wait:
#   must end check_failed / chained_mismatch, its plain trials passing);
# - then on an H200 session ZU (table ZN with zs_all.json: its ring GEMV runs now include the chained trial), on an
#   H100 the H100 table's K-split and ring GEMV winner configs (must pass, chained trial included).
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
source "$(dirname "$0")/device_lib.sh"
# pipeline_runs.py reads the slot and language from the path (<language>/<slot>_<what>.py)
NEG=/tmp/kt_neg/triton/dense_gemm_chained_reads_early.py
mkdir -p "$(dirname "$NEG")" && cp tests/cheats/chained_reads_early.py "$NEG"
pr 150 2 --what chain-negative --hardware "$HW" --variants "$NEG" --configs default --shapes q_b_proj,o_proj --batches 1,4
if [ "$HW" = h200 ]; then  # session ZU's own log starts afresh: keep this one
  mv "$L" "$OUT/run-chain-negative.log"
  exec bash "$(dirname "$0")/session_zu.sh"
fi
pr 150 2 --what chain-ksplit --hardware "$HW" --variants kernels/variants/cute/dense_gemm_ksplit_gemv.py \
  --configs '[{"ROWS": 1, "KWARPS": 14, "UNROLL": 2}]' --shapes fused_qkv_a --batches 1
pr 200 2 --what chain-ring --hardware "$HW" --variants kernels/variants/cute/dense_gemm_ring_gemv.py \
  --configs '[{"WROWS": 16, "RT": 1, "KWARPS": 8, "STAGES": 8, "XRING": 1, "KSPLIT": 1, "ROTATE": 1}, {"WROWS": 16, "RT": 2, "KWARPS": 4, "STAGES": 4, "XRING": 1, "KSPLIT": 2, "ROTATE": 0}]' \
  --shapes fused_qkv_a --batches 4,16
grep -E "^== |verdict|passed|failed|rror" "$L" | tail -40
