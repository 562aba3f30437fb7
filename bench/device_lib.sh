# Shared by the device session scripts (bench/h200_session_*.sh): sourced, not run.
# Sets up the log under $OUT and gives run (a logged step), pr (pipeline_runs with its table
# dropped: the device returns at most 8 files, the .md is rebuilt here by bench/render_tables.py)
# use_plan (set PLAN for bench/service_tuning.py) and selftest_exported (install each exported wheel apart
# from kerneltune and run its self-test; KT_SELFTEST_ARGS, e.g. "--slot dense_gemm", narrows it; KT_WHEEL_DIR
# takes the wheels from there instead of $OUT; KT_SELFTEST_TXT names its output under $OUT, selftest.txt by default).
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PYTHONUNBUFFERED=1 KT_DATA_DIR=/tmp/kt
# A warm machine keeps /tmp from the call before: its service data folders (results already back under its $OUT) would
# make bench/service_tuning.py --resume-db refuse to start, so each call starts them afresh.
rm -rf /tmp/kt-service-*
L=$OUT/run.log
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > "$L"
# provenance of every file a call writes beside this log (the JSON results carry their own header)
PROVENANCE="date $(date -u +%FT%TZ), device $(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1), commit ${KT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}, script ${0#"$PWD"/}"
echo "# $PROVENANCE" >> "$L"
# CuTe DSL (the carried .cutexz) and /tmp/site2 (the carried .whl2, with apache-tvm-ffi, which loads the wheels'
# ahead-of-time CuTe objects: without it the self-test JIT-compiles them instead, as session 33's H200 self-test did,
# "did not load: No module named 'tvm_ffi'") on an exported wheel's self-test path
CUTE_SELFTEST_PATH=/tmp/site/nvidia_cutlass_dsl/python_packages:/tmp/site:/tmp/site2
run() { echo "== $(date +%T) $*" >> "$L"; "$@" >> "$L" 2>&1; echo "== exit $? $(date +%T)" >> "$L"; }
# pr LIMIT_S PARALLEL pipeline_runs-args...
pr() { run timeout "$1" python3 bench/pipeline_runs.py --parallel "$2" --timeout 90 --out "$OUT" "${@:3}"; rm -f "$OUT"/*.md; }
selftest_exported() {
  local whl pkg
  for whl in "${KT_WHEEL_DIR:-$OUT}"/*.whl; do  # KT_WHEEL_DIR: wheels carried in, not built here
    [ -e "$whl" ] || continue
    pkg=$(basename "$whl" | cut -d- -f1)
    # a fresh target: pip --target keeps an existing package (a warm machine's earlier wheel) without --upgrade
    rm -rf /tmp/exported
    run python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/exported "$whl"
    # from /tmp with only the wheel on the path (and KT_SELFTEST_PATH: CuTe DSL where a winner is a CuTe
    # kernel, exported as source): the package must run without kerneltune
    echo "# $PROVENANCE; python3 -m $pkg.selftest ${KT_SELFTEST_ARGS:-} ($(basename "$whl"))" > "$OUT/${KT_SELFTEST_TXT:-selftest.txt}"
    (cd /tmp && PYTHONPATH=/tmp/exported${KT_SELFTEST_PATH:+:$KT_SELFTEST_PATH} timeout "${KT_SELFTEST_S:-240}" python3 -m "$pkg.selftest" ${KT_SELFTEST_ARGS:-}) >> "$OUT/${KT_SELFTEST_TXT:-selftest.txt}" 2>&1
    echo "== selftest exit $? $(date +%T)" >> "$L"
  done
}
# first_of PATH...: the first of the paths that exists (a session script's latest table; an unmatched glob stays as typed)
first_of() { local f; for f in "$@"; do [ -e "$f" ] && { echo "$f"; return; }; done; }
# carried_table W: the start of a call on a table carried in bench/results/ (W: its JSON; empty when none is here, which
# ends the call): logs it, puts CuTe DSL on the self-test's path (use_plan) and writes /tmp/no_runs.json, a plan of no runs
carried_table() {
  [ -n "$1" ] || { echo "== no table for $HW" >> "$L"; cat "$L"; exit 3; }
  echo "== table $1" >> "$L"
  use_plan bench/plans/s26_h200.json
  python3 -c "import json; json.dump({'deployment': json.load(open('$PLAN'))['deployment'], 'variants': []}, open('/tmp/no_runs.json', 'w'))"
}
# export_table W WHAT DIR: the wheel of table W as it stands (the plan of no runs, resumed from its DB) into DIR
export_table() {
  run timeout 120 python3 bench/service_tuning.py --plan /tmp/no_runs.json --hardware "$HW" --what "$2" \
      --workers 1 --export --budget-s 30 --resume-db "${1%.json}.sqlite" --data-dir "/tmp/kt-service-$2" --out "$3"
}
# selftest_every_m WHEEL_DIR TOTAL_S: the wheel in WHEEL_DIR self-tested at every M each entry's bucket serves
# (selftest --every-m; untimed there, the measured M timed in 3 rounds), in three parts with their own share of TOTAL_S
# and their own $OUT/selftest-every-m-PART.txt: the slots whose kernels tie a tile to M first, the MoE (slow stock,
# large inputs) last, so that a part that runs out of time leaves the others checked. A part asks only for the slots
# the wheel has tuned entries of (the self-test refuses a slot it has none of).
selftest_every_m() {
  local dir=$1 total=$2
  _every_m_part "$dir" dense $(( total * 50 / 100 )) dense_gemm rmsnorm_gemm mla_norms_gemm oproj_residual_norm
  _every_m_part "$dir" small $(( total * 22 / 100 )) add_rmsnorm router shared_expert
  _every_m_part "$dir" moe $(( total * 28 / 100 )) moe_experts moe_experts_shared
  local f
  for f in "$OUT"/selftest-every-m-*.txt; do
    [ -e "$f" ] && echo "== $f: $(grep -c '^PASS' "$f") PASS; $(grep -E 'entries passed' "$f")" >> "$L"
  done
}
_every_m_part() {  # WHEEL_DIR NAME SECONDS SLOTS...
  local dir=$1 name=$2 secs=$3 whl have
  shift 3
  whl=$(ls "$dir"/*.whl | head -n1)
  have=$(python3 -c "import json, sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); t = json.loads(z.read(next(n for n in z.namelist() if n.endswith('/dispatch.json')))); print(' '.join(s for s in sys.argv[2:] if any(not b.get('stock') for sh in t['slots'].get(s, {}).values() for b in sh['buckets'].values())))" "$whl" "$@")
  [ -n "$have" ] || { echo "== every-M part $name: no tuned entries of $*" >> "$L"; return; }
  # shellcheck disable=SC2086  # one --slot per word
  KT_WHEEL_DIR=$dir KT_SELFTEST_S=$secs KT_SELFTEST_TXT=selftest-every-m-$name.txt \
    KT_SELFTEST_ARGS="$(printf -- '--slot %s ' $have)--every-m --rounds 3" selftest_exported
}
# use_plan FILE: PLAN=FILE when CuTe DSL imports here (and the exported wheel's self-test gets its path),
# else PLAN is a copy of FILE without its CuTe variants.
use_plan() {
  PLAN=$1
  if python3 -c "import cutlass.cute" 2>> "$L"; then
    export KT_SELFTEST_PATH=$CUTE_SELFTEST_PATH
  else
    echo "== CuTe DSL not importable: the plan runs without its CuTe variant" >> "$L"
    python3 -c "import json,sys; p=json.load(open(sys.argv[1])); p['variants']=[v for v in p['variants'] if v['language']!='cute']; json.dump(p,open('/tmp/plan.json','w'))" "$1"
    PLAN=/tmp/plan.json
  fi
}
# layer_after_tuning WHAT BATCHES TIMEOUT_S: the decode layer with the winners of the table this call's tuning step
# (bench/h200_session_x.sh) wrote as $OUT/*-WHAT.json, logged after that step in the same run.log. The step's wheel
# goes first (self-tested there; at most 8 files come back). KT_LAYER_TIMEOUT_S overrides TIMEOUT_S.
layer_after_tuning() {
  rm -f "$OUT"/*.whl
  local w
  w=$(ls -t "$OUT"/*-"$1".json | head -n1)
  run timeout "${KT_LAYER_TIMEOUT_S:-$3}" python3 bench/decode_layer.py --batches "$2" --winners "$w" --out "$OUT"
}
# tune_then_layer SLOTS BATCHES TIMEOUT_S SELFTEST_S: one card's call as sessions 23 and 24 make it: bench/h200_session_x.sh
# with the KT_PLAN, KT_WHAT, KT_TUNING_S and KT_RESUME_DB the caller exported, on the card the caller found ($HW), with
# no MoE or attention block and the exported wheel self-tested on SLOTS (e.g. "--slot router") for SELFTEST_S
# seconds (KT_SELFTEST_S overrides it); then layer_after_tuning at BATCHES; then the log's summary lines.
tune_then_layer() {
  KT_REQUIRE_HW=$HW KT_MOE_BATCHES=none KT_ATTN_BATCHES= KT_SELFTEST_S=${KT_SELFTEST_S:-$4} \
    KT_SELFTEST_ARGS="$1 --rounds 10" bash "$(dirname "${BASH_SOURCE[0]}")/h200_session_x.sh"
  layer_after_tuning "$KT_WHAT" "$2" "$3"
  grep -E "^== |M= *[0-9]|rror" "$L" | tail -20
}
# tune_in_call: bench/h200_session_x.sh as the H200 form of a call runs it (sessions 26-29): the KT_PLAN, KT_WHAT,
# KT_TUNING_S and KT_RESUME_DB the caller exported, on the card the caller found ($HW), no MoE or attention block, no
# self-test.
tune_in_call() {
  KT_REQUIRE_HW=$HW KT_MOE_BATCHES=none KT_ATTN_BATCHES= KT_SELFTEST_S=0 bash "$(dirname "${BASH_SOURCE[0]}")/h200_session_x.sh"
}
# tune_then_every_m: tune_in_call, then the new table's wheel self-tested at every M (selftest_every_m) in what is left
# of KT_CALL_S (550 s: the command's 600 s less the install), then the log's summary lines (sessions 29 and 34).
tune_then_every_m() {
  tune_in_call
  use_plan "$KT_PLAN"  # KT_SELFTEST_PATH: CuTe DSL and apache-tvm-ffi on the self-test's path (the CuTe entries need it)
  local left=$(( ${KT_CALL_S:-550} - SECONDS ))
  if [ "$left" -ge 60 ]; then selftest_every_m "$OUT" "$left"; else echo "== no time for the every-M self-test" >> "$L"; fi
  rm -f "$OUT"/*.whl  # at most 8 files come back: the wheel is rebuilt from the DB by any export
  grep -E "^== |geomean|rror" "$L" | tail -24
}
# tune_then_layer_in_call BATCHES MIN_S: the H200 form of a call (sessions 26-28): bench/h200_session_x.sh with the
# KT_PLAN, KT_WHAT, KT_TUNING_S and KT_RESUME_DB the caller exported, on the card the caller found ($HW), with no MoE or
# attention block and no self-test (tune_in_call); then the decode layer at BATCHES in what is left of the call (KT_CALL_S: the
# command's 600 s less the install, 550 by default) if that is at least MIN_S; then the log's summary lines.
tune_then_layer_in_call() {
  tune_in_call
  local left=$(( ${KT_CALL_S:-550} - SECONDS ))  # the install before the script takes ~30 s of the call's limit
  if [ "$left" -ge "$2" ]; then layer_after_tuning "$KT_WHAT" "$1" "$left"; else echo "== no time for the layer" >> "$L"; fi
  grep -E "^== |M= *[0-9]|rror" "$L" | tail -12
}
