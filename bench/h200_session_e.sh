#!/usr/bin/env bash
# Device session E on the lent H200 (issues: win back the decode path, export): the Triton variants
# of every single-GPU slot tuned through the embedded service itself (API + GPU workers, SQLite +
# filesystem broker), the results file written from its winners table, the winners exported as the
# vLLM wheel, installed apart from kerneltune and self-tested on the same GPU; then the MoE block of
# one layer. Needs the service wheels (.whl2). At most 8 files come back from $OUT.
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 KT_DATA_DIR=/tmp/kt KT_LOG_FORMAT=plain
L=$OUT/run.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$L"
run() { echo "== $(date +%T) $*" >> "$L"; "$@" >> "$L" 2>&1; echo "== exit $? $(date +%T)" >> "$L"; }
S=${KT_TUNING_S:-330}
run timeout "$S" python3 bench/service_tuning.py --plan bench/plans/h200_decode.json --hardware h200 \
    --workers "${KT_WORKERS:-8}" --export --budget-s "$(( S - 45 ))" --out "$OUT"
rm -f "$OUT"/*.md  # rebuilt from the JSON here
tail -20 /tmp/kt-service/logs/worker0.log >> "$L" 2>/dev/null
for whl in "$OUT"/*.whl; do
  [ -e "$whl" ] || continue
  pkg=$(basename "$whl" | cut -d- -f1)
  run python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/exported "$whl"
  # from /tmp with only the wheel on the path: the package must run without kerneltune
  (cd /tmp && PYTHONPATH=/tmp/exported timeout 90 python3 -m "$pkg.selftest") > "$OUT/selftest.txt" 2>&1
  echo "== selftest exit $?" >> "$L"
done
run timeout "${KT_MOE_S:-70}" python3 bench/moe_block.py --batches 1,4,16,64
grep -E "^== |wrote|job |geomean|export|rror" "$L" | tail -24
