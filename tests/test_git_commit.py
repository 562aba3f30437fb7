"""search.landscape.git_commit, the commit most results-writing bench scripts record: KT_COMMIT where a device call
set it, else HEAD, marked "+dirty" where tracked files differ from it, so a result made from edited code or on a
device whose copy of .git lags the tree that travelled does not name a commit that did not make it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from search.landscape import git_commit


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def test_head_then_dirty_once_a_tracked_file_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KT_COMMIT", raising=False)
    _git(tmp_path, "init", "-q")
    (tmp_path / "kernel.py").write_text("x = 1\n")
    _git(tmp_path, "add", "kernel.py")
    _git(tmp_path, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "one")
    head = _git(tmp_path, "rev-parse", "HEAD")
    assert git_commit(tmp_path) == head
    (tmp_path / "out.json").write_text("{}")  # an untracked output is not a change to the code
    assert git_commit(tmp_path) == head
    (tmp_path / "kernel.py").write_text("x = 2\n")
    assert git_commit(tmp_path) == head + "+dirty"
    monkeypatch.setenv("KT_COMMIT", "0d2ab54")  # a device call names the tree it sent
    assert git_commit(tmp_path) == "0d2ab54"


def test_unknown_outside_a_repository(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KT_COMMIT", raising=False)
    assert git_commit(tmp_path / "nowhere") == "unknown"
