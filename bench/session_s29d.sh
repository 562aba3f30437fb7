#!/usr/bin/env bash
# Device call D of session 29 (carry .whl2 and .cutexz): the card's latest table (as carried in bench/results/: H100
# h100-s30 or h100-s29, H200 s34, s33, s29 or s25) resumed by the service with no new plan, and its winners checked at the M of their bucket
# that no run measured (bench/service_tuning.py --bucket-checks-s: POST /v1/winners/bucket-checks, short runs on the
# workers) for KT_CHECKS_S seconds (200 by default); what is not done by then is cancelled and reported. The table it
# writes (decode-tuning-...-checks) is the resumed one with those runs in it; its export lists what is still unchecked.
HW=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oiE 'h100|h200' | tr A-Z a-z)
source "$(dirname "$0")/device_lib.sh"  # first_of, and the log under $OUT
if [ "$HW" = h200 ]; then
  W=$(first_of bench/results/*-h200-decode-tuning-s34.json bench/results/*-h200-decode-tuning-s33.json \
      bench/results/*-h200-decode-tuning-s29.json bench/results/*-h200-decode-tuning-s25.json)
elif [ "$HW" = h100 ]; then
  # the checked table first: a call resumes the checks the last one's time cut (its cancelled runs are planned again)
  W=$(first_of bench/results/*-h100-decode-tuning-h100-s30.json bench/results/*-h100-decode-tuning-h100-s29-checks.json bench/results/*-h100-decode-tuning-h100-s29.json)
else
  echo "session 29 call D: no plan for this card: $HW"; exit 0
fi
export KT_LOG_FORMAT=plain
carried_table "$W"  # CuTe DSL importable here, or the CuTe winners' checks could not compile
S=${KT_CHECKS_S:-200}
WHAT=$(basename "${W%.json}" | sed -E 's/^[0-9-]+-(h100|h200)-//; s/-checks$//')-checks
run timeout $(( S + 90 )) python3 bench/service_tuning.py --plan /tmp/no_runs.json --hardware "$HW" --what "$WHAT" \
    --workers "${KT_WORKERS:-12}" --export --budget-s 30 --bucket-checks-s "$S" --resume-db "${W%.json}.sqlite" \
    --data-dir /tmp/kt-service-s29d --out "$OUT"
rm -f "$OUT"/*.md "$OUT"/*.whl
grep -E "^== |bucket checks|exported|rror" "$L" | tail -12
