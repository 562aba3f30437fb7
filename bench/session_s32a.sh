#!/usr/bin/env bash
# Device call A of session 32 (carry .whl2, .cutexz, .tables and .aotw), on whichever card comes:
# - H200: bench/session_s29c.sh (its plan of the H200's untimed buckets, resumed from the table of record, then the
#   new table's export self-tested at every M; carry .tables from bench/pack_tables.sh on the s25 table);
# - H100: the H100 table's wheel from .aotw, exported with chained CuTe builds (levels 1 and 2 beside the plain ones):
#   bench/aot_startup.py (JIT cold, JIT warm, ahead of time; plain and chained; outputs compared bit for bit, chained
#   against plain too), then its dense_gemm self-test at every M (each line says how each M and its chained build
#   were made). Files are named -s32 so they stand beside session 31's.
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
if [ "$HW" = h200 ]; then exec bash "$(dirname "$0")/session_s29c.sh"; fi
source "$(dirname "$0")/device_lib.sh"
W=$(first_of .aotw/*_"$HW"-*.whl)
[ -n "$W" ] || { echo "session 32 call A: no carried wheel for this card: $HW" | tee -a "$L"; exit 0; }
run timeout "${KT_AOT_BENCH_S:-400}" python3 bench/aot_startup.py --wheel "$W" \
    --out "$OUT/$(date +%F)-$HW-cute-aot-startup-chained-s32.json"
rm -rf /tmp/aotw && mkdir -p /tmp/aotw && cp "$W" /tmp/aotw/
KT_SELFTEST_PATH=/tmp/site/nvidia_cutlass_dsl/python_packages:/tmp/site:/tmp/site2 KT_WHEEL_DIR=/tmp/aotw \
  KT_SELFTEST_S=$(( ${KT_CALL_S:-550} - SECONDS )) KT_SELFTEST_TXT=selftest-aot-chained-dense-every-m-s32.txt \
  KT_SELFTEST_ARGS="--slot dense_gemm --every-m --rounds 3" selftest_exported
grep -E "^== |builds|rror" "$L" | tail -12
grep -E "entries passed|^FAIL" "$OUT/selftest-aot-chained-dense-every-m-s32.txt" | tail -5
