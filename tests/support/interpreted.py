"""Kernel cases checked under Triton's interpreter in a child process.

TRITON_INTERPRET must be set before triton is imported, and pytest has imported it already, so a test
module runs itself as a script with the variable set (``interpreted_results``), and its ``__main__``
block runs the cases and prints one JSON line (``run_cases``): case name -> "ok" or the traceback.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys
import traceback
from collections.abc import Callable, Mapping
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]


def interpreted_results(test_file: str) -> dict[str, str]:
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, test_file], env=env, capture_output=True, text=True, timeout=900)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert proc.returncode == 0 and lines, proc.stderr[-4000:]
    return json.loads(lines[-1])


def run_cases(cases: Mapping[str, tuple[Callable[..., Any], tuple[Any, ...]]]) -> None:
    results = {}
    for case, (fn, args) in cases.items():
        try:
            fn(*args)
            results[case] = "ok"
        except Exception:  # report, keep going
            results[case] = traceback.format_exc()[-3000:]
    print(json.dumps(results))
