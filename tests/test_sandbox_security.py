"""Hostile variants: each must get a verdict other than passed, and do no harm, the harm checked from
outside the sandbox (files, processes, the worker's own state). Real sandboxed children, in the
default sandbox mode (KT_SANDBOX_MODE, zygote unless set)."""

from __future__ import annotations

import glob
import hashlib
import shutil
import os
import resource
import signal
import sqlite3
import tempfile
import uuid
from pathlib import Path

import pytest

from evaluation_helpers import REPO, SHIPPED, run_source
from kernels.backends.base import source_hash
from workers import sandbox
from workers.protocol import Verdict



@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("kt-data")
    with sqlite3.connect(d / "kerneltune.db") as db:  # what a worker's KT_DATABASE_URL points at
        db.execute("CREATE TABLE runs (id TEXT, secret TEXT)")
        db.execute("INSERT INTO runs VALUES ('r1', 'db-secret-7f3a')")
    return d


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _leftovers(source: str) -> list[str]:
    """Private directories of runs of this source still on disk."""
    run_id = f"test-{source_hash(source)[:8]}"
    return glob.glob(os.path.join(tempfile.gettempdir(), "kt-owner-*", f"kt-run-{run_id}-*"))


def test_database_and_data_dir_are_out_of_reach(data_dir, monkeypatch):
    db = data_dir / "kerneltune.db"
    monkeypatch.setenv("KT_DATABASE_URL", f"sqlite:///{db}")
    before = _digest(db)
    marker = f"cache-ok-{uuid.uuid4().hex[:8]}"
    src = f"""
import os
open(os.path.join(os.environ["KT_COMPILE_CACHE"], {marker!r}), "w").write("ok")  # the one allowed place
for attempt in (lambda: print(open({str(db)!r}, "rb").read()),
                lambda: open({str(db)!r}, "ab").write(b"pwned"),
                lambda: os.remove({str(db)!r}),
                lambda: print(os.listdir({str(data_dir)!r}), open({str(data_dir / 'bandwidth.json')!r}).read())):
    try:
        attempt()
    except OSError:
        pass  # swallowing the refusal must not help
""" + SHIPPED
    r = run_source(src, data_dir)
    assert (r.verdict, r.reason_code) == (Verdict.rejected, "data_dir_access"), r.reason
    assert "db-secret" not in r.sandbox.stdout + r.sandbox.stderr
    assert db.exists() and _digest(db) == before
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT secret FROM runs").fetchall() == [("db-secret-7f3a",)]
    assert (data_dir / "compile-cache" / marker).read_text() == "ok"


def test_other_processes_environment_is_out_of_reach(data_dir):
    worker = os.getpid()
    src = f"""
import os
for path in ("/proc/{worker}/environ", f"/proc/{{os.getppid()}}/environ", "/proc/1/environ"):
    try:
        print(open(path, "rb").read())
    except OSError:
        pass
""" + SHIPPED
    r = run_source(src, data_dir)
    assert (r.verdict, r.reason_code) == (Verdict.rejected, "proc_access"), r.reason
    assert "PATH=" not in r.sandbox.stdout


def _named_processes(name: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and Path(f"/proc/{entry}/comm").read_text().strip() == name:
                found.append(int(entry))
        except OSError:
            pass
    return found


# Bounded bombs: if the guard failed they would leave a few named sleepers (killed by the test), not
# take the host down. Each escapes the process group (setsid) so that killpg alone would miss it.
BOMB_PRELUDE = """
import ctypes, os, time
def _sleeper():
    os.setsid()
    ctypes.CDLL(None).prctl(15, b"{name}", 0, 0, 0)  # PR_SET_NAME: findable from outside
    time.sleep(120)
    os._exit(0)
"""
BOMBS = {
    "os_fork": """
for _ in range(20):
    try:
        if os.fork() == 0:
            _sleeper()
    except OSError:
        pass
""",
    "multiprocessing": """
import multiprocessing
for _ in range(20):
    try:
        multiprocessing.get_context("fork").Process(target=_sleeper).start()
    except OSError:
        pass
""",
}


@pytest.mark.parametrize("bomb", sorted(BOMBS))
def test_fork_bomb_is_refused_and_leaves_no_process(bomb, data_dir):
    name = f"ktbomb{uuid.uuid4().hex[:6]}"
    r = run_source(BOMB_PRELUDE.format(name=name) + BOMBS[bomb] + SHIPPED, data_dir)
    survivors = _named_processes(name)
    for pid in survivors:
        os.kill(pid, signal.SIGKILL)
    assert (r.verdict, r.reason_code) == (Verdict.rejected, "forbidden_subprocess"), r.reason
    assert survivors == []
    assert r.sandbox.limits["RLIMIT_NPROC"] < sandbox._tasks_of(os.getuid()) + 2 * sandbox.NPROC_HEADROOM


def test_disk_filler_is_killed_at_the_file_size_limit_and_leaves_nothing(data_dir, monkeypatch):
    monkeypatch.setenv("KT_SANDBOX_FSIZE_MB", "32")
    src = """
import os
def build(config, shape):
    chunk = b"x" * (1 << 20)
    with open("filler.bin", "wb") as f:
        for _ in range(256):  # bounded: were the limit missing, 256 MiB and a pass, not a full disk
            f.write(chunk)
            f.flush()
    import torch
    return lambda x, w, out: torch.matmul(x, w.t(), out=out)
"""
    r = run_source(src, data_dir)
    assert (r.verdict, r.reason_code, r.sandbox.signal) == (Verdict.crashed, "signal_SIGXFSZ", "SIGXFSZ"), r.reason
    assert r.sandbox.limits["RLIMIT_FSIZE"] == 32 << 20
    assert _leftovers(src) == []  # the private directory, filler included, is gone


def test_writes_outside_the_private_directory_are_refused(data_dir):
    targets = [Path(tempfile.gettempdir()) / f"kt_pwned_{uuid.uuid4().hex}", REPO / f"kt_pwned_{uuid.uuid4().hex}"]
    src = f"""
import os
for path in {[str(t) for t in targets]!r}:
    try:
        with open(path, "w") as f:
            f.write("pwned")
    except OSError:
        pass
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT))
    except OSError:
        pass
try:
    os.symlink({str(targets[0])!r}, "link")  # inside the private dir: allowed; writing through it is not
    open("link", "w").write("pwned")
except OSError:
    pass
""" + SHIPPED
    try:
        r = run_source(src, data_dir)
        leaked = [str(t) for t in targets if t.exists()]
    finally:
        for t in targets:
            t.unlink(missing_ok=True)
    assert (r.verdict, r.reason_code) == (Verdict.rejected, "write_outside_sandbox"), r.reason
    assert leaked == []


def test_memory_exhaustion_is_a_verdict_and_the_worker_is_unharmed(data_dir):
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    src = """
def build(config, shape):
    hoard = []
    for _ in range(32):  # bounded at 8 GiB: were the limit missing, a pass (and a slow test)
        hoard.append(bytearray(256 << 20))
    import torch
    return lambda x, w, out: torch.matmul(x, w.t(), out=out)
"""
    # An honest run first: it caches the bandwidth (measuring it needs more than this limit) and
    # starts the zygote whose survival is checked below.
    assert run_source(SHIPPED, data_dir).verdict == Verdict.passed
    zygote = sandbox.zygote_pid()
    r = run_source(src, data_dir, memory_limit_mb=2048)
    assert r.verdict in (Verdict.compile_failed, Verdict.crashed), r.reason
    assert "MemoryError" in r.reason or r.sandbox.signal == "SIGKILL", r.reason
    assert r.sandbox.limits["RLIMIT_AS"] == 2048 << 20
    # The worker: its peak memory did not grow with the hoard, and its zygote (if any) lives on.
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before < 200 << 10  # KiB
    if zygote is not None:
        assert sandbox.zygote_pid() == zygote


def test_toolchain_compiler_by_its_link_name_is_allowed(tmp_path: Path) -> None:
    """Triton builds its launcher with `/usr/bin/gcc` on GPU hosts; on Debian and Ubuntu that is a link
    to x86_64-linux-gnu-gcc-N. The toolchain must be recognised by the name it was invoked under (seen
    refused on the H200 before this was fixed), while a `gcc` the variant writes itself stays refused."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.fail("gcc is not installed (Triton needs it on GPU hosts; Debian's build-essential)")
    source = f'''
import os, subprocess, tempfile, torch

def build(config, shape):
    d = tempfile.mkdtemp()
    c = os.path.join(d, "k.c")
    with open(c, "w") as f:
        f.write("int k(void) {{ return 1; }}\\n")
    subprocess.run([{gcc!r}, c, "-O2", "-shared", "-fPIC", "-o", os.path.join(d, "k.so")], check=True)
    def run(x, w, out):
        out.copy_(x.float().matmul(w.float().t()).to(out.dtype))
    return run
'''
    r = run_source(source, tmp_path)
    assert r.verdict == Verdict.passed, (r.verdict, r.reason_code, r.reason)


def test_toolchain_through_posix_spawn_is_allowed_and_other_programs_are_not(tmp_path: Path) -> None:
    """Triton runs ptxas with close_fds=False, so subprocess uses os.posix_spawn (its own audit event):
    the toolchain must pass through it (seen refused on the H200), any other program must not."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.fail("gcc is not installed (Triton needs it on GPU hosts; Debian's build-essential)")
    honest = f'''
import subprocess, torch

def build(config, shape):
    subprocess.run([{gcc!r}, "--version"], check=True, close_fds=False, stdout=subprocess.DEVNULL)
    def run(x, w, out):
        out.copy_(x.float().matmul(w.float().t()).to(out.dtype))
    return run
'''
    r = run_source(honest, tmp_path)
    assert r.verdict == Verdict.passed, (r.verdict, r.reason_code, r.reason)
    hostile = honest.replace(repr(gcc), repr(shutil.which("sh") or "/bin/sh")).replace('"--version"', '"-c", "true"')
    r = run_source(hostile, tmp_path)
    assert (r.verdict, r.reason_code) == (Verdict.rejected, "forbidden_subprocess"), (r.verdict, r.reason)
    assert "posix_spawn" in r.reason or "Popen" in r.reason
