#!/usr/bin/env bash
# Device session J on the lent H200 (carry .cutexz and .whlp): the lock-wait fix on the GPU. The MoE
# variant (slow to check: 4.2 GB of weights) and the CuTe GEMV on fused_qkv_a (the runs session H
# lost to timeouts while queued behind MoE runs) side by side, 8 at once, with a 30 s limit each:
# a run's time queued for the device no longer counts against it (sandbox.lock_wait_s records it).
source "$(dirname "$0")/device_lib.sh"
M='[{"BLOCK_M":16,"BLOCK_N":32,"BLOCK_K":128,"SPLIT_K":4,"num_warps":4,"num_stages":3,"COMBINE":"grouped","BLOCK_N2":64,"BLOCK_K2":128,"num_warps2":4,"num_stages2":2}]'
C='[{"ROWS_PER_WARP":1,"WARPS_PER_CTA":4,"UNROLL":2},{"ROWS_PER_WARP":1,"WARPS_PER_CTA":8,"UNROLL":4}]'
# one pipeline_runs per variant, both at once on one lock directory; 2 s of timing per run makes a queue
run timeout 150 python3 bench/pipeline_runs.py --parallel 4 --timeout 30 --min-time 2 --out "$OUT" --what lock-wait-moe \
    --variants kernels/variants/triton/moe_experts_grouped.py --configs "$M" --batches 1,4,16,64 &
run timeout 150 python3 bench/pipeline_runs.py --parallel 4 --timeout 30 --min-time 2 --out "$OUT" --what lock-wait-cute \
    --variants kernels/variants/cute/dense_gemm_warp_gemv.py --configs "$C" --shapes fused_qkv_a --batches 1,2,4
wait
rm -f "$OUT"/*.md
python3 - "$OUT" >> "$L" <<'PY'
import json, sys, glob
for f in sorted(glob.glob(sys.argv[1] + "/*lock-wait-*.json")):
    for r in json.load(open(f))["rows"]:
        print(r["shape"], r["M"], r["verdict"], r.get("lock_wait_s"), round(r.get("child_wall_s") or 0, 1))
PY
grep -E "^== |passed|timeout|wrote" "$L" | tail -30
