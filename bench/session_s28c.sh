#!/usr/bin/env bash
# Session 28's third device call, on the machine call B left warm (carry .whl2 and .cutexz; PYTHONPATH as set by the
# install line of the earlier calls): call B's self-test of the whole wheel ran out of its 90 s in shared_expert (66
# entries passed, none failed), so the table it wrote (h100-s28, carried in bench/results/) is exported again from its
# DB and the shared_expert entries are self-tested. Run inline in session 28; these are its lines.
export KT_LOG_FORMAT=plain
W=bench/results/2026-12-07-h100-decode-tuning-h100-s28
python3 -c "import json; json.dump({'deployment': json.load(open('bench/plans/s28_h100.json'))['deployment'], 'variants': []}, open('/tmp/no_runs.json', 'w'))" &&
  timeout 100 python3 bench/service_tuning.py --plan /tmp/no_runs.json --hardware h100 --what export-s28c --workers 1 \
    --export --budget-s 30 --resume-db $W.sqlite --data-dir /tmp/kt-service-s28c --out /tmp/s28c-export > "$OUT/export.log" 2>&1
echo export $?
rm -rf /tmp/exported
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/exported /tmp/s28c-export/*.whl &&
  (cd /tmp && PYTHONPATH=/tmp/exported:/tmp/site/nvidia_cutlass_dsl/python_packages:/tmp/site timeout 120 \
    python3 -m kerneltune_ls_kimi_k2_like_h100.selftest --slot shared_expert --rounds 10) > "$OUT/selftest-shared.txt" 2>&1
echo selftest $?
tail -9 "$OUT/selftest-shared.txt"
