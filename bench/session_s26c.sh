#!/usr/bin/env bash
# The last two device calls of session 26, on the H100 that call B (bench/session_s26b.sh) had warm, written down after
# they ran: the calls ran these lines inline (tree 0d2ab54, the last call without KT_COMMIT, so its layer JSON says
# 1d3d3b5, the commit the device's .git copy had; decode_layer.py, moe_block.py and the kernels are the same in both).
# 1. the whole self-test of the wheel call B exported from table h100-s26 (call B's self-test ran moe_experts_shared
#    only), apart from kerneltune as selftest_exported in bench/device_lib.sh runs it;
# 2. the decode layer at M = 64 with that table, which call A ran at M = 4 and 16 only.
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
W=bench/results/2026-12-06-h100-decode-tuning-h100-s26.json
rm -rf /tmp/exported
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/exported /tmp/s26b-export/*.whl
(cd /tmp && PYTHONPATH=/tmp/exported:/tmp/site/nvidia_cutlass_dsl/python_packages:/tmp/site \
  timeout 200 python3 -m kerneltune_ls_kimi_k2_like_h100.selftest --rounds 5) > "$OUT/selftest-full.txt" 2>&1
echo "exit $?" >> "$OUT/selftest-full.txt"
timeout 150 python3 bench/decode_layer.py --batches 64 --winners "$W" --out "$OUT" > "$OUT/layer64.log" 2>&1
echo "exit $?" >> "$OUT/layer64.log"
