#!/usr/bin/env bash
# Device call A of session 32 (carry .whl2, .cutexz, .tables and .aotw), on whichever card comes:
# - H200: bench/session_s29c.sh (its plan of the H200's untimed buckets, resumed from the table of record, then the
#   new table's export self-tested at every M; carry .tables from bench/pack_tables.sh on the s25 table);
# - H100: bench/session_s31a.sh on the H100 table's wheel in .aotw, exported with chained CuTe builds (levels 1 and 2
#   beside the plain ones): bench/aot_startup.py (plain and chained builds, JIT against ahead of time, outputs
#   compared bit for bit, chained against plain too), then its dense_gemm self-test at every M (each line says how
#   each M and its chained build were made); files named -chained-s32, beside session 31's.
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
if [ "$HW" = h200 ]; then exec bash "$(dirname "$0")/session_s29c.sh"; fi
KT_AOT_SUFFIX=chained-s32 exec bash "$(dirname "$0")/session_s31a.sh"
