"""export/aot.py: CuTe DSL entries compiled ahead of time for sm_90a on this CPU machine, and the wheel that ships them.

Real compiles (nvidia-cutlass-dsl 4.3.5, apache-tvm-ffi, cc) of the shipped ksplit GEMV: the shared objects must
export the tvm-ffi entry the package loads, link the two runtime libraries the package finds on the GPU host, come
out byte-identical wherever they are built, and record the compile-time constants the package compares with its
variant's own build(). Loading and running them needs a GPU: bench/aot_startup.py does that on the device (JIT and
AOT outputs compared bit for bit, bench/results/*-cute-aot-startup.json).
"""

from __future__ import annotations

import json
import platform
import shutil
import sqlite3
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest

from db.session import make_engine, make_session_factory
from export import aot, export_package
from export.collect import Entry, RunEvidence
from export.templates.aot import signature, spec_for, unusable
from kernels.catalogue import get_slot
from kernels.deployment import Deployment
from kernels.variants.cute import dense_gemm_ksplit_gemv as ksplit

REPO = Path(__file__).resolve().parents[1]
KSPLIT = REPO / "kernels" / "variants" / "cute" / "dense_gemm_ksplit_gemv.py"
H100_TABLE = REPO / "bench" / "results" / "2026-12-07-h100-decode-tuning-h100-s30.sqlite"


def _shape(name: str) -> dict[str, Any]:
    dep = Deployment(spec="kimi-k2-like", tp=8, batch_sizes=[1])
    sh = next(s for s in get_slot("dense_gemm").shapes(dep) if s.name == name)
    return {"slot": sh.slot, "name": sh.name, "dims": dict(sh.dims), "dtype": sh.dtype}


def _entry(bucket: str, config: dict[str, Any], source: str | None = None, name: str = "o_proj",
           variant_hash: str = "ab" * 32) -> Entry:
    ev = RunEvidence(run_id="r", m=int(bucket.split("-")[0]), verdict="passed", check_trials=[], timer="graph",
                     median_us=1.0, p10_us=None, p90_us=None, cv=None, n=None, baseline_median_us=2.0, speedup=2.0,
                     speedup_ci_lo=1.9, speedup_ci_hi=2.1, frac_of_floor=None, uses_library=False, fingerprint_id="fp",
                     finished_at=None)
    shape = _shape(name)
    return Entry(slot="dense_gemm", shape_key=f"{name}[K={shape['dims']['K']},N={shape['dims']['N']}]", shape=shape,
                 bucket=bucket, variant_hash=variant_hash, language="cute", source=source or KSPLIT.read_text(),
                 config=config, config_space_keys=sorted(config), author="t", agent=None, parent_hash=None, notes="",
                 winner=ev, runs=[ev])


GOOD = {"ROWS": 2, "KWARPS": 4, "UNROLL": 1}


def _dynamic(path: Path) -> str:
    return subprocess.run(["readelf", "--dyn-syms", "-d", "-W", str(path)], capture_output=True, text=True,
                          check=True).stdout


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cc"
    monkeypatch.setenv("KT_COMPILE_CACHE", str(root))
    return root


def test_arch_of_the_evidence() -> None:
    assert aot.arch_for(["sm_90"]) == "sm_90a"
    assert aot.arch_for(["sm_100a"]) == "sm_100a"
    assert aot.arch_for(["sm_80"]) == "sm_80"
    assert aot.arch_for([]) is None and aot.arch_for(["sm_90", "sm_100"]) is None


def test_which_variants_chain_and_what_is_planned() -> None:
    cute_dir = REPO / "kernels" / "variants" / "cute"
    assert aot.chains(KSPLIT.read_text()) and aot.chains((cute_dir / "dense_gemm_ring_gemv.py").read_text())
    assert not aot.chains((cute_dir / "dense_gemm_warp_gemv.py").read_text())
    assert not aot.chains("def compile_target(config, shape:\n")  # not Python: nothing to chain
    assert not aot.chains("def build(config, shape, pdl=0): ...\ndef compile_target(config, shape): ...")
    warp = _entry("3-4", {"ROWS": 2}, source=(cute_dir / "dense_gemm_warp_gemv.py").read_text())
    slower = _entry("5-8", GOOD)
    slower.runs = [slower.winner.model_copy(update={"m": 6, "speedup_ci_hi": 0.9})]  # measured slower at M = 6
    got = sorted((it.entry.bucket, it.m, it.pdl) for it in aot.plan([warp, slower]))
    assert got == [("3-4", 3, 0), ("3-4", 4, 0)] + [("5-8", m, p) for m in (5, 7, 8) for p in (0, 1, 2)]


@pytest.mark.alone  # its compile children take every core: CPU timings of parallel tests would suffer
def test_cute_entries_compile_ahead_of_time(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entries = [_entry("1", GOOD), _entry("2", GOOD)]
    report, sections = aot.build(entries, ["sm_90"], tmp_path / "pkg")
    # each M plain and at both chain levels: the ksplit GEMV chains
    assert (report.builds, report.chained, report.arch, report.skipped) == (6, 4, "sm_90a", [])
    assert set(report.toolchain) == {"nvidia-cutlass-dsl", "apache-tvm-ffi"}
    for e in entries:
        m = int(e.bucket)
        section = sections[e.slot, e.shape_key, e.bucket]
        for pdl in (0, 1, 2):
            spec = section["ms"][str(m)] if not pdl else section["chained"][str(pdl)][str(m)]
            assert spec == spec_for(section, m, pdl)
            so = tmp_path / "pkg" / "aot" / spec["file"]
            dyn = _dynamic(so)
            # the package calls this symbol through tvm-ffi; everything else stays inside the object
            assert f"__tvm_ffi_{spec['function']}" in dyn
            assert "__cute_internal" not in dyn
            assert "libcuda_dialect_runtime.so" in dyn and "libtvm_ffi.so" in dyn
            # what the package compares with the cute.compile call of the variant's own build(pdl)
            _, args = ksplit.compile_target(GOOD, {**e.shape["dims"], "M": m}, pdl)
            assert (spec["jit_function"], spec["constexprs"], spec["runtime_args"]) == ("_gemv", *signature(args))
            assert signature(args)[1] == 4 and spec["constexprs"][-1] == pdl  # x, w, out, the stream; PDL last
        assert spec_for(section, m + 1) is None and spec_for(section, m, 3) is None

    # the same builds elsewhere, from nothing: the same bytes (the wheel's reproducibility rests on it)
    first = {p.name: p.read_bytes() for p in (tmp_path / "pkg" / "aot").iterdir()}
    monkeypatch.setenv("KT_COMPILE_CACHE", str(tmp_path / "cc2"))
    again, _ = aot.build(entries, ["sm_90"], tmp_path / "elsewhere" / "pkg2")
    assert again.builds == 6
    assert {p.name: p.read_bytes() for p in (tmp_path / "elsewhere" / "pkg2" / "aot").iterdir()} == first

    # a second export of the same winners takes them from the cache: no compile child
    monkeypatch.setenv("KT_COMPILE_CACHE", str(cache))
    monkeypatch.setattr(aot, "_run_child", lambda *a: pytest.fail("compiled again despite the cache"))
    cached, _ = aot.build(entries, ["sm_90"], tmp_path / "pkg3")
    assert cached.builds == 6


@pytest.mark.alone  # its compile children take every core: CPU timings of parallel tests would suffer
def test_a_build_that_fails_is_left_to_jit(cache: Path, tmp_path: Path) -> None:
    bad = _entry("3-4", {"ROWS": 64, "KWARPS": 4, "UNROLL": 1})  # M * ROWS <= 64 fails at M = 3 and 4
    crashing = _entry("1", GOOD, source=KSPLIT.read_text() + "\nimport os\nos._exit(9)\n", name="q_b_proj",
                      variant_hash="cd" * 32)  # another source: another module
    report, sections = aot.build([bad, crashing, _entry("2", GOOD)], ["sm_90"], tmp_path / "pkg")
    # a child that dies fails the entry it was on, not the other entries it had been given: all of "2" is built
    assert report.builds == 3 and list(sections) == [("dense_gemm", "o_proj[K=1024,N=7168]", "2")]
    why = sorted((p.bucket, p.reason) for p in report.skipped)
    assert [b for b, _ in why] == ["1"] * 3 + ["3-4"] * 3  # plain and both chain levels of each
    assert all("JIT-compiled on the target: the compile child exited with status 9" in r for b, r in why if b == "1")
    assert [r.split(":")[0] for b, r in why if b == "3-4"] == [
        "M=3-4 JIT-compiled on the target", "M=3-4 chained (level 1) JIT-compiled on the target",
        "M=3-4 chained (level 2) JIT-compiled on the target"]
    assert all("M * ROWS <= 64" in r for b, r in why if b == "3-4")


def test_no_toolchain_means_no_aot_and_says_why(cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    report, sections = aot.build([_entry("1", GOOD)], ["sm_90"], tmp_path / "pkg")
    assert (report.builds, sections) == (0, {})
    assert [p.reason for p in report.skipped] == ["no C linker (cc) where the export runs: JIT-compiled on the target"]
    report, _ = aot.build([_entry("1", GOOD)], [], tmp_path / "pkg")
    assert "no single device arch" in report.skipped[0].reason


def test_the_package_says_when_it_cannot_load(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = {"file": "x.so"}
    assert unusable(spec, None) is None
    assert unusable(None, None) == "no ahead-of-time build for this M"
    assert unusable(None, None, 2) == "no ahead-of-time build for this M at chain level 2"
    other = "aarch64" if platform.machine() != "aarch64" else "x86_64"
    assert f"the ahead-of-time builds are for a {other} host" in unusable(spec, other)
    monkeypatch.setenv("KT_LS_AOT", "0")
    assert unusable(spec, None) == "KT_LS_AOT=0"


@pytest.fixture
def table(tmp_path: Path) -> Path:
    """The H100 table of record with two of its CuTe winners left (the rest of its CuTe winners deleted): a real
    service DB whose evidence came from device runs."""
    db = tmp_path / "h100.sqlite"
    shutil.copyfile(H100_TABLE, db)
    con = sqlite3.connect(db)
    con.execute("""DELETE FROM winners WHERE run_id IN (SELECT r.id FROM runs r JOIN variants v ON v.id = r.variant_id
                   WHERE v.language = 'cute') AND NOT (batch_bucket = '1' AND shape_key LIKE 'o_proj%')
                   AND NOT (batch_bucket = '2' AND shape_key LIKE 'o_proj%')""")
    con.commit()
    con.close()
    return db


def _export(db: Path, out: Path, **kw: Any) -> Any:
    with make_session_factory(make_engine(f"sqlite:///{db}"))() as s:
        return export_package(s, hardware="h100", model="kimi-k2-like", out_dir=out, allow_partial=True, **kw)


@pytest.mark.alone  # its compile children take every core: CPU timings of parallel tests would suffer
def test_wheel_ships_the_builds(table: Path, cache: Path, tmp_path: Path) -> None:
    res = _export(table, tmp_path / "w")
    # bucket 1's K-split GEMV is a version from before it could chain, bucket 2's chains: 1 + 3 builds
    assert (res.aot.builds, res.aot.chained, res.aot.arch) == (4, 2, "sm_90a")
    with zipfile.ZipFile(res.wheel_path) as z:
        names = set(z.namelist())
        dispatch = json.loads(z.read(f"{res.package}/dispatch.json"))
        manifest = json.loads(z.read(f"{res.package}/manifest.json"))
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert f"{res.package}/aot.py" in names
    cute = [(shape, b, e) for shape, spec in dispatch["slots"]["dense_gemm"].items()
            for b, e in spec["buckets"].items() if e.get("language") == "cute"]
    assert sorted(b for _, b, _ in cute) == ["1", "2"]
    for _, b, e in cute:
        assert f"{res.package}/aot/{e['aot']['ms'][b]['file']}" in names
        assert e["aot"]["arch"] == "sm_90a"
        assert sorted(e["aot"].get("chained", {})) == ([] if b == "1" else ["1", "2"])
        for level in e["aot"].get("chained", {}).values():
            assert f"{res.package}/aot/{level[b]['file']}" in names
    assert (manifest["aot"]["builds"], manifest["aot"]["chained"]) == (4, 2)
    assert "Requires-Dist: nvidia-cutlass-dsl==4.3.5" in meta and "Requires-Dist: apache-tvm-ffi" in meta

    # the same DB gives the same wheel (from the cache now); without AOT, no objects and no pins
    assert _export(table, tmp_path / "w2").sha256 == res.sha256
    plain = _export(table, tmp_path / "w3", aot=False)
    with zipfile.ZipFile(plain.wheel_path) as z:
        assert not [n for n in z.namelist() if n.endswith(".so")]
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    assert "Requires-Dist: nvidia-cutlass-dsl\n" in meta and "tvm" not in meta and plain.aot.builds == 0
