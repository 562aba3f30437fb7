"""The embedded stack owns its port and its folder, and bench/service_tuning.py stopped by `timeout` (SIGTERM) leaves
no part of it running. Seen on the H200 (session 33): a tuning step cut by `timeout` left its API and workers up; the
next step's stack could not bind the port, its client talked to the old API instead, and that step's results file and
DB copy came from two different services."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from service.client import ApiError, Client
from service.embedded import EmbeddedStack, StackError, embedded_env, port_answers
from tests.support.servers import free_port

REPO = Path(__file__).resolve().parents[1]


def test_the_stack_uses_its_own_folder_whatever_the_shell_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KT_DATA_DIR", str(tmp_path / "someone-elses"))
    monkeypatch.delenv("KT_DATABASE_URL", raising=False)
    env = embedded_env(tmp_path / "mine")
    assert env["KT_DATA_DIR"] == str(tmp_path / "mine")
    assert env["KT_DATABASE_URL"] == f"sqlite:///{tmp_path / 'mine' / 'kerneltune.db'}"


def test_a_stack_refuses_a_port_another_server_holds(tmp_path: Path) -> None:
    port = free_port()
    with socket.socket() as other:
        other.bind(("127.0.0.1", port))
        other.listen()
        stack = EmbeddedStack(tmp_path / "data", port=port)
        with pytest.raises(StackError, match=f"already answers: another server holds port {port}"):
            stack.start()
        assert stack.procs == []  # nothing was started
    assert not port_answers("127.0.0.1", port)


def _stack_pids(data_dir: Path) -> list[int]:
    """Processes whose environment names this stack's folder (the API and workers get KT_DATA_DIR=data_dir)."""
    mark = f"KT_DATA_DIR={data_dir}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if mark in (entry / "environ").read_bytes().split(b"\0"):
                    pids.append(int(entry.name))
            except OSError:  # gone, or not ours to read
                continue
    return pids


@pytest.mark.timeout(300)
def test_service_tuning_stopped_by_sigterm_stops_its_stack_and_keeps_the_db(tmp_path: Path) -> None:
    # A run whose build sleeps: the step is mid-plan, with a run in flight, when the signal comes.
    slow = tmp_path / "dense_gemm_slow.py"
    slow.write_text((REPO / "kernels/variants/torch/dense_gemm_matmul.py").read_text() + (
        "\n\nimport time\n_plain_build = build\n\n\ndef build(config, shape):\n"
        "    time.sleep(60)\n    return _plain_build(config, shape)\n"))
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"deployment": {"spec": "tiny-moe", "tp": 1, "batch_sizes": [1]}, "variants": [
        {"file": str(slow), "slot": "dense_gemm", "language": "torch", "configs": [{"n_chunks": 1}]}]}))
    data_dir, out, port = tmp_path / "data", tmp_path / "out", free_port()
    proc = subprocess.Popen([sys.executable, "bench/service_tuning.py", "--plan", str(plan), "--hardware", "cpu",
                             "--device", "cpu", "--what", "cut", "--workers", "1", "--budget-s", "600",
                             "--data-dir", str(data_dir), "--out", str(out), "--port", str(port)],
                            cwd=REPO, env={**os.environ, "KT_LOG_FORMAT": "plain"}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        t0 = time.monotonic()
        while True:  # until the plan's run is claimed by the worker
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() - t0 < 200, "no run was claimed"
            token_file = data_dir / "admin-token"
            try:
                jobs = (Client(f"http://127.0.0.1:{port}", token=token_file.read_text().strip()).get("/v1/jobs")
                        if token_file.exists() else [])
            except ApiError:  # not up yet
                jobs = []
            if any(j["progress"]["running"] for j in jobs):
                break
            time.sleep(0.5)
        assert _stack_pids(data_dir), "the stack's processes are not visible"
        proc.send_signal(signal.SIGTERM)
        output = proc.communicate(timeout=60)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0 and "stopped by signal 15" in output, output[-2000:]
    assert not port_answers("127.0.0.1", port), "the API outlived the step"
    assert _stack_pids(data_dir) == [], "a worker or the API outlived the step"
    [db] = out.glob("*-cpu-cut.sqlite")  # the DB copy is kept: its runs can be exported later
    with sqlite3.connect(db) as c:
        assert c.execute("select count(*) from jobs").fetchone()[0] == 1
    assert not list(out.glob("*-cpu-cut.json"))  # no results file from a step that did not finish


def _kerneltune(*args: str) -> list[str]:
    return [sys.executable, "-m", "service.cli", *args]


def test_kerneltune_up_on_a_taken_port_says_so(tmp_path: Path) -> None:
    port = free_port()
    with socket.socket() as other:
        other.bind(("127.0.0.1", port))
        other.listen()
        out = subprocess.run(_kerneltune("up", "--port", str(port), "--data-dir", str(tmp_path / "data")), cwd=REPO,
                             capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and f"another server holds port {port}" in out.stdout, out.stdout + out.stderr


@pytest.mark.timeout(180)
def test_kerneltune_up_stopped_by_sigterm_stops_its_stack(tmp_path: Path) -> None:
    data_dir, port = tmp_path / "data", free_port()
    proc = subprocess.Popen(_kerneltune("up", "--port", str(port), "--data-dir", str(data_dir)), cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        t0 = time.monotonic()
        while not (port_answers("127.0.0.1", port) and len(_stack_pids(data_dir)) >= 2):  # the API and a worker
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() - t0 < 120, "the stack did not come up"
            time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not port_answers("127.0.0.1", port), "the API outlived `kerneltune up`"
    assert _stack_pids(data_dir) == [], "a worker or the API outlived `kerneltune up`"
