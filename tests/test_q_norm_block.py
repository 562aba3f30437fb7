"""bench/q_norm_block.py on the CPU: the four q-path variants run under Triton's interpreter, agree with the
fp64 reference, and the fused kernel's configs come from a tuning file's winners."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))


def test_every_path_runs_and_matches_the_reference(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "bench/q_norm_block.py", "--device", "cpu", "--dims", "96,768", "--sets", "2",
                          "--reps", "1", "--batches", "1,3", "--out", str(tmp_path)], cwd=REPO,
                         env={**os.environ, "TRITON_INTERPRET": "1"}, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    doc = json.loads((tmp_path / "q_norm_block.json").read_text())
    assert doc["device"]["name"] == "cpu" and doc["commit"] and doc["dims"] == {"N": 96, "K": 768, "eps": 1e-6}
    assert [r["M"] for r in doc["rows"]] == [1, 3]
    for r in doc["rows"]:
        for path in ("stock", "stock_fused_norm", "fused", "q_b_proj_alone"):
            assert r[path]["median_us"] > 0
        assert max(r["rel_l2"].values()) < 1e-2, r["rel_l2"]


def test_fused_configs_are_the_tuning_files_winners() -> None:
    import q_norm_block

    configs = q_norm_block.winner_configs(str(REPO / "bench/results/2026-12-03-h200-decode-tuning-r.json"))
    assert sorted(configs) == [1, 4, 16] and configs[1]["SPLIT_K"] == 6
    assert q_norm_block.pick(configs, 8, {}) == configs[4] and q_norm_block.pick(configs, 64, {}) == configs[16]
    assert q_norm_block.pick({}, 1, {"d": 1}) == {"d": 1}
