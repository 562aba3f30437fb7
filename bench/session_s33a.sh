#!/usr/bin/env bash
# Device call A of session 33 (carry .whl2 with apache-tvm-ffi, .cutexz, .tables and .aotw), on whichever card comes:
# - H200: bench/session_s29c.sh (plan s29_h200.json resumed from the table of record, then the new table's export
#   self-tested at every M; .tables from bench/pack_tables.sh on the s25 table);
# - H100: the H200 table of record's wheel (.aotw/*_h200-*.whl, `bench/export_table.py` on the s25 table, CuTe kernels
#   compiled ahead of time for sm_90a) self-tested at every M each entry's bucket serves. H100 and H200 run the same
#   sm_90a code, so this checks the H200 winners' correctness at the M no H200 run measured; its timings are an H100's
#   and say nothing of the H200. Files end -h200-table (the results copy names them ...-h100-...-h200-table-s33).
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
if [ "$HW" = h200 ]; then exec bash "$(dirname "$0")/session_s29c.sh"; fi
source "$(dirname "$0")/device_lib.sh"
W=$(first_of .aotw/*_h200-*.whl)
[ -n "$W" ] || { echo "session 33 call A: no carried H200 wheel" | tee -a "$L"; exit 0; }
rm -rf /tmp/aotw && mkdir -p /tmp/aotw && cp "$W" /tmp/aotw/
export KT_SELFTEST_PATH=$CUTE_SELFTEST_PATH
selftest_every_m /tmp/aotw $(( ${KT_CALL_S:-550} - SECONDS ))
for f in "$OUT"/selftest-every-m-*.txt; do [ -e "$f" ] && mv "$f" "${f%.txt}-h200-table.txt"; done
grep -E "^== |rror" "$L" | tail -12
grep -hE "entries passed|^FAIL" "$OUT"/selftest-every-m-*.txt | tail -8
