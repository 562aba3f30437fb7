#!/usr/bin/env bash
# Wheels for a GPU host that reaches no registry (Python 3.12, x86-64), each set small enough to
# travel with the code: .whlp = what the evaluation pipeline needs beyond the host's torch/Triton
# image (pydantic, optuna), .whl2 = the service stack (API, DB, Celery) for bench/h200_session_b.sh, and
# apache-tvm-ffi, through which an exported package loads its ahead-of-time CuTe kernels (export/aot.py).
# CuTe DSL comes from ../shared/device/fetch-cute-wheel.sh into .whl. All three are git-ignored.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
dl() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$@"; }
for d in .whlp .whl2; do grep -qx "/$d/" .git/info/exclude 2>/dev/null || echo "/$d/" >> .git/info/exclude; done
PIPELINE=(pydantic==2.14.4 pydantic-core==2.50.5 annotated-types typing-inspection optuna==5.1.0 colorlog)
dl .whlp "${PIPELINE[@]}"
dl .whl2 "${PIPELINE[@]}" fastapi==0.165.0 starlette uvicorn==0.55.0 greenlet alembic==1.20.1 mako \
  celery==5.7.0 kombu==5.7.0 billiard vine amqp click-didyoumean click-repl click-plugins prompt-toolkit wcwidth \
  tzdata tzlocal opentelemetry-api importlib-metadata setuptools wheel apache-tvm-ffi==0.1.15.post2
# SQLAlchemy's pure-Python wheel (2 MB, not the 4.7 MB compiled one): with the CuTe tarball and the repo a call
# carries at most 64 MiB, and the C extensions only speed up row handling the tuning run barely does.
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation py --platform any \
  -d .whl2 sqlalchemy==2.1.9
du -sh .whlp .whl2
