#!/usr/bin/env bash
# Device session E on the lent H200 (issues: win back the decode path, export): the Triton variants
# of every single-GPU slot tuned through the embedded service itself (API + GPU workers, SQLite +
# filesystem broker), the results file written from its winners table, the winners exported as the
# vLLM wheel, installed apart from kerneltune and self-tested on the same GPU; then the MoE block of
# one layer. Needs the service wheels (.whl2). At most 8 files come back from $OUT.
source "$(dirname "$0")/device_lib.sh"
export KT_LOG_FORMAT=plain
S=${KT_TUNING_S:-330}
run timeout "$S" python3 bench/service_tuning.py --plan bench/plans/h200_decode.json --hardware h200 \
    --workers "${KT_WORKERS:-8}" --export --budget-s "$(( S - 45 ))" --out "$OUT"
rm -f "$OUT"/*.md  # rebuilt from the JSON here
tail -20 /tmp/kt-service/logs/worker0.log >> "$L" 2>/dev/null
selftest_exported
run timeout "${KT_MOE_S:-70}" python3 bench/moe_block.py --batches 1,4,16,64
grep -E "^== |wrote|job |geomean|export|rror" "$L" | tail -24
