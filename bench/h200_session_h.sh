#!/usr/bin/env bash
# Device session H on the lent H200 (service wheels .whl2): the jobs session F's budget cut, through
# the embedded service: the MoE experts (its stock timed eagerly now), the CuTe DSL GEMV (configs
# from the session G landscape) and the Triton split-K GEMM on the three attention projections; the
# export of the winners and the wheel's self-test on the GPU.
# CuTe DSL does not fit one call beside .whl2: a call just before this one on the same (warm) machine
# installs it under $KT_CUTE_SITE (bench/h200_session_h0.sh). Without it the CuTe variant is left out
# of the plan and the log says so.
source "$(dirname "$0")/device_lib.sh"
export KT_LOG_FORMAT=plain KT_RUN_TIMEOUT_S=${KT_RUN_TIMEOUT_S:-90}
PLAN=${KT_PLAN:-bench/plans/h200_decode_rest.json}
CUTE_SITE=${KT_CUTE_SITE:-/tmp/site}
if PYTHONPATH=$CUTE_SITE:$CUTE_SITE/nvidia_cutlass_dsl/python_packages python3 -c "import cutlass.cute" 2>> "$L"; then
  export PYTHONPATH=$PYTHONPATH:$CUTE_SITE/nvidia_cutlass_dsl/python_packages:$CUTE_SITE
  export KT_SELFTEST_PATH=$CUTE_SITE/nvidia_cutlass_dsl/python_packages:$CUTE_SITE
else
  echo "== CuTe DSL not installed on this machine: the plan runs without its CuTe variant" >> "$L"
  python3 -c "import json,sys; p=json.load(open(sys.argv[1])); p['variants']=[v for v in p['variants'] if v['language']!='cute']; json.dump(p,open('/tmp/plan.json','w'))" "$PLAN"
  PLAN=/tmp/plan.json
fi
S=${KT_TUNING_S:-420}
run timeout "$S" python3 bench/service_tuning.py --plan "$PLAN" --hardware h200 \
    --workers "${KT_WORKERS:-8}" --export --budget-s "$(( S - 45 ))" --out "$OUT"
rm -f "$OUT"/*.md
selftest_exported
grep -E "^== |wrote|job |geomean|export|rror" "$L" | tail -24
