"""bench/chain_check.py on a machine with no GPU: the cases a plan gives it, and a clear refusal to run (programmatic
dependent launch needs an sm_90+ GPU; its numbers are device results)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_the_chain_plan_gives_one_case_per_winner_with_its_dims() -> None:
    sys.path.insert(0, str(REPO / "bench"))
    import chain_check

    got = chain_check.cases(json.loads((REPO / "bench/plans/chain_zx.json").read_text()))
    assert len(got) == 9
    dims = {(c["shape"], c["N"], c["K"]) for c in got}
    assert dims == {("fused_qkv_a", 2112, 7168), ("q_b_proj", 1536, 1536), ("o_proj", 7168, 1024)}
    assert sorted(c["M"] for c in got if c["file"].endswith("ksplit_gemv.py")) == [1, 1, 1]
    assert all(set(c["config"]) for c in got)


def test_a_machine_without_an_sm90_gpu_is_refused(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "bench/chain_check.py", "--plan", "bench/plans/chain_zx.json",
                          "--out", str(tmp_path)], cwd=REPO, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "needs an sm_90+ GPU" in out.stderr
    assert not (tmp_path / "chain_check.json").exists()
