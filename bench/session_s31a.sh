#!/usr/bin/env bash
# Device call A of session 31 (carry .whl2 with apache-tvm-ffi, .cutexz and .aotw: the wheels `kerneltune export`
# built on the CPU, with their CuTe DSL kernels compiled ahead of time for sm_90a, one per card's table of record):
# on whichever card comes, that card's wheel
# - bench/aot_startup.py: every CuTe entry built and run at every M of its bucket, JIT (cold, then warm cache) against
#   the wheel's shared objects, outputs compared bit for bit;
# - its self-test of dense_gemm at every M each entry serves (selftest --every-m), the CuTe kernels loaded ahead of
#   time (each line says how each M was built).
# KT_AOT_SUFFIX, when set, ends the two files' names (-$KT_AOT_SUFFIX), so a later session's stand beside these.
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
source "$(dirname "$0")/device_lib.sh"
W=$(first_of .aotw/*_"$HW"-*.whl)
[ -n "$W" ] || { echo "session 31 call A: no carried wheel for this card: $HW" | tee -a "$L"; exit 0; }
run timeout "${KT_AOT_BENCH_S:-400}" python3 bench/aot_startup.py --wheel "$W" \
    --out "$OUT/$(date +%F)-$HW-cute-aot-startup${KT_AOT_SUFFIX:+-$KT_AOT_SUFFIX}.json"
rm -rf /tmp/aotw && mkdir -p /tmp/aotw && cp "$W" /tmp/aotw/
KT_SELFTEST_PATH=$CUTE_SELFTEST_PATH KT_WHEEL_DIR=/tmp/aotw \
  KT_SELFTEST_S=$(( ${KT_CALL_S:-550} - SECONDS )) KT_SELFTEST_TXT=selftest-aot-dense-every-m${KT_AOT_SUFFIX:+-$KT_AOT_SUFFIX}.txt \
  KT_SELFTEST_ARGS="--slot dense_gemm --every-m --rounds 3" selftest_exported
grep -E "^== |builds|rror" "$L" | tail -12
grep -E "entries passed|^FAIL" "$OUT/selftest-aot-dense-every-m${KT_AOT_SUFFIX:+-$KT_AOT_SUFFIX}.txt" | tail -5
