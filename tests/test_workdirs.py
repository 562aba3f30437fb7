"""Owner folders (workers/workdirs.py): a live process's folder survives a sweep, a SIGKILLed one's does not."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from workers import workdirs

REPO = Path(__file__).resolve().parents[1]


def _owner(tmp: Path) -> tuple[subprocess.Popen[str], str]:
    """A process that makes its owner folder in ``tmp``, writes a file in it, says where, and waits."""
    script = textwrap.dedent(f"""
        import os, sys, tempfile
        sys.path.insert(0, {str(REPO)!r})
        tempfile.tempdir = {str(tmp)!r}
        from workers.workdirs import run_root
        run = tempfile.mkdtemp(prefix="kt-run-x-", dir=run_root())
        open(os.path.join(run, "variant.py"), "w").write("pass")
        print(run, flush=True)
        sys.stdin.read()
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def test_sweep_keeps_a_live_owner_and_removes_a_killed_one(tmp_path: Path) -> None:
    live, live_run = _owner(tmp_path)
    dead, dead_run = _owner(tmp_path)
    try:
        assert os.path.isfile(os.path.join(live_run, "variant.py")) and os.path.isdir(dead_run)
        assert workdirs.sweep_stale(str(tmp_path)) == []  # both alive
        dead.send_signal(signal.SIGKILL)
        dead.wait(10)
        removed = workdirs.sweep_stale(str(tmp_path))
        assert removed == [os.path.dirname(dead_run)]
        assert not os.path.exists(dead_run) and os.path.isfile(os.path.join(live_run, "variant.py"))
    finally:
        for p in (live, dead):
            p.kill()
            p.wait(10)
    # the survivor's folder goes too once it has died, and a folder without a lock (an owner still starting) stays
    (tmp_path / f"{workdirs.OWNER_PREFIX}starting").mkdir()
    assert workdirs.sweep_stale(str(tmp_path)) == [os.path.dirname(live_run)]
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"{workdirs.OWNER_PREFIX}starting"]


def test_own_folder_is_made_once_per_process_and_survives_its_own_sweep() -> None:
    root = workdirs.run_root()
    assert workdirs.run_root() == root and os.path.isfile(os.path.join(root, workdirs.LOCK_NAME))
    assert root not in workdirs.sweep_stale()
    assert os.path.isdir(root)
