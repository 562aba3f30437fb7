"""bench/results_files.py: which shipped file each variant of a results file's winners table is."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import results_files  # noqa: E402


def test_a_files_own_map_wins() -> None:
    doc = {"variant_files": {"7": "kernels/variants/cute/dense_gemm_warp_gemv.py"}, "jobs": [],
           "command": "bench/service_tuning.py --resume-db nowhere.sqlite"}
    assert results_files.variant_files(doc) == {7: "kernels/variants/cute/dense_gemm_warp_gemv.py"}


def test_older_files_are_followed_along_the_resume_chain(tmp_path: Path) -> None:
    first = tmp_path / "first.json"
    first.write_text(json.dumps({"jobs": [{"variant_id": 1, "file": "a.py"}, {"variant_id": 2, "file": "old.py"}],
                                 "command": "bench/service_tuning.py --plan p.json"}))
    second = {"jobs": [{"variant_id": 2, "file": "b.py"}],
              "command": f"bench/service_tuning.py --plan q.json --resume-db {tmp_path / 'first.sqlite'}"}
    assert results_files.resumed_from(second) == first
    assert results_files.variant_files(second) == {1: "a.py", 2: "b.py"}  # the later session's word wins
    # the repo's own night chain: R resumed Q, which resumed P, ... back to K, whose jobs name the MoE kernel
    r = json.loads((REPO / "bench/results/2026-12-03-h200-decode-tuning-r.json").read_text())
    assert results_files.variant_files(r)[5] == "kernels/variants/triton/moe_experts_grouped.py"
