#!/usr/bin/env bash
# Device session H on the lent H200, carrying .whl2 (service stack) and .cutexz (CuTe DSL as an xz
# tarball: bench/pack_cute_xz.sh; the 56 MiB wheel and .whl2 do not fit one call's 64 MiB, 39 MiB of
# xz does). Install line:
#   mkdir -p /tmp/site && tar -xJf .cutexz/cute_site.tar.xz -C /tmp/site && python3 -m pip install -q \
#     --no-index --no-deps --no-compile --target /tmp/site2 .whl2/*.whl && \
#   export PYTHONPATH=/tmp/site2:/tmp/site/nvidia_cutlass_dsl/python_packages:/tmp/site
# 1. The jobs session F's budget cut, through the embedded service: MoE experts (stock timed eagerly
#    now), the CuTe DSL GEMV (configs from the session G landscape) and the Triton split-K GEMM on
#    the three attention projections; the winners exported; the wheel self-tested on the GPU.
# 2. Issue 9's last gaps through the worker's evaluation: Triton split-K on lm_head at every M (the
#    config whose BLOCK_M fits M) and the CuTe GEMV on lm_head at M=64.
source "$(dirname "$0")/device_lib.sh"
export KT_LOG_FORMAT=plain KT_RUN_TIMEOUT_S=${KT_RUN_TIMEOUT_S:-90}
use_plan "${KT_PLAN:-bench/plans/h200_decode_rest.json}"
S=${KT_TUNING_S:-360}
run timeout "$S" python3 bench/service_tuning.py --plan "$PLAN" --hardware h200 \
    --workers "${KT_WORKERS:-8}" --export --budget-s "$(( S - 45 ))" --out "$OUT"
rm -f "$OUT"/*.md
T='[{"BLOCK_M":16,"BLOCK_N":64,"BLOCK_K":256,"SPLIT_K":4,"num_warps":4,"num_stages":3},{"BLOCK_M":32,"BLOCK_N":64,"BLOCK_K":256,"SPLIT_K":4,"num_warps":4,"num_stages":3},{"BLOCK_M":64,"BLOCK_N":64,"BLOCK_K":256,"SPLIT_K":4,"num_warps":4,"num_stages":3}]'
# side by side: workers/gpu_lock.py (same KT_DATA_DIR) keeps their timed phases apart
pr "${KT_H_LM_S:-120}" 7 --what dense-gemm-triton-lm-head --variants kernels/variants/triton/dense_gemm_splitk.py --configs "$T" --shapes lm_head &
pr 100 1 --what dense-gemm-cute-lm-head --variants kernels/variants/cute/dense_gemm_warp_gemv.py --configs default --shapes lm_head --batches 64
wait
selftest_exported
grep -E "^== |wrote|job |geomean|export|rror" "$L" | tail -24
