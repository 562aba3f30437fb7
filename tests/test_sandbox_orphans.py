"""A SIGKILLed worker leaves no sandbox child behind: in zygote mode the zygote sees its control socket
close and kills its children (and each child has PR_SET_PDEATHSIG on the zygote); in spawn mode the
child has PR_SET_PDEATHSIG on the evaluating thread. Without either, a hung kernel would keep the
device after its worker is gone. Nor any file: the next worker to start a run sweeps the dead one's
scratch folders (workers/workdirs.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from workers.workdirs import sweep_stale

REPO = Path(__file__).resolve().parents[1]
HANG = "import time\ndef build(config, shape):\n    time.sleep(600)\n"


def _sandbox_children(run_id: str) -> list[int]:
    """Processes whose working directory is this run's private sandbox directory."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        if os.path.basename(cwd).startswith(f"kt-run-{run_id}-"):
            pids.append(int(entry))
    return pids


@pytest.mark.parametrize("mode", ["zygote", "spawn"])
def test_sigkilled_worker_leaves_no_sandbox_child(tmp_path: Path, mode: str) -> None:
    run_id = f"orphan-{mode}"
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(REPO)!r}); sys.path.insert(0, {str(REPO / 'tests')!r})
        from evaluation_helpers import DEVICE, SMALL
        from kernels.backends.base import source_hash
        from workers.protocol import RunSpec
        from workers.sandbox import evaluate
        src = {HANG!r}
        spec = RunSpec(run_id={run_id!r}, slot="dense_gemm", language="torch", source=src,
                       source_hash=source_hash(src), config={{}}, shape=SMALL.to_json(), m=1, device=DEVICE,
                       seed=1, timeout_s=300)
        evaluate(spec, data_dir={str(tmp_path)!r})
    """)
    worker = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "KT_SANDBOX_MODE": mode},
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 120  # a zygote start imports torch: seconds on a loaded machine
        while not (children := _sandbox_children(run_id)):
            assert worker.poll() is None, f"the evaluating process exited early ({worker.returncode})"
            assert time.monotonic() < deadline, "the sandbox child never started"
            time.sleep(0.2)
        time.sleep(1.0)  # past the child's setup: it is in the variant's sleep now
        workdirs = {os.readlink(f"/proc/{p}/cwd") for p in children}
        worker.send_signal(signal.SIGKILL)
        worker.wait(10)
        deadline = time.monotonic() + 15
        while alive := [p for p in children if Path(f"/proc/{p}").exists() and not _zombie(p)]:
            assert time.monotonic() < deadline, f"sandbox children {alive} outlived their SIGKILLed worker"
            time.sleep(0.2)
        sweep_stale()  # what the next worker's first run does
        assert not [d for d in workdirs if os.path.exists(d)], "the killed worker's run directory was not swept"
    finally:
        if worker.poll() is None:
            worker.kill()
        for pid in _sandbox_children(run_id):
            os.kill(pid, signal.SIGKILL)


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
