"""export/: the latency_specialized wheel from a database filled by real harness runs on the CPU.

The database holds real RunResults from workers.sandbox.evaluate (child process, check, bench vs
stock) for shipped torch variants on the tiny-moe spec, recorded through db.queries. The wheel is
installed into a fresh venv holding only torch (no kerneltune) and used from there.

vLLM itself is not installed: its PyPI wheel (0.34.0, 239 MB, CUDA build with CUDA torch as a
dependency) cannot be installed on this CPU machine. The plugin's registration call path is tested
under a minimal stand-in package named ``vllm`` that reproduces only CustomOp / PluggableLayer
``register_oot`` and ``op_registry_oot`` as vLLM 0.34 defines them (class-name keyed replacement).
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from db.migrate import upgrade
from db.models import Run, Variant
from db.queries.jobs import PlannedRun, create_job
from db.queries.runs import record_result
from db.queries.variants import get_or_create_variant
from db.session import make_engine, make_session_factory
from export import ExportRefused, export_package
from export import fused_moe_configs as fmc
from export.record import ExportRecord
from kernels.catalogue import get_slot
from kernels.deployment import Deployment
from search.space import ConfigSpace
from workers.protocol import BenchSettings, RunSpec
from workers.sandbox import evaluate

from tests.support.faulty import WRONG_AT_3

REPO = Path(__file__).resolve().parents[1]
MODEL = "tiny-moe"
DENSE_MODEL = "tiny-dense"  # a second model name whose only measured bucket loses to stock
# (slot, variant file, config, shape name or None for all, Ms, model)
PLAN = [
    ("moe_experts", "torch/moe_experts_gather_bmm.py", {"intermediate": "bf16", "token_chunk": 0}, None, [1, 2], MODEL),
    ("add_rmsnorm", "torch/add_rmsnorm_torch.py", {"stats_from": "fp32_sum", "weight_mul": "fp32"}, None, [1], MODEL),
    ("dense_gemm", "torch/dense_gemm_matmul.py", {"n_chunks": 2}, "q_b_proj", [1], DENSE_MODEL),
]


def _run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)


@pytest.fixture(scope="session")
def db_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite database filled by real evaluations (one child process per run)."""
    path = tmp_path_factory.mktemp("exportdb") / "kt.db"
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine=engine)
    data_dir = tmp_path_factory.mktemp("ktdata")
    with make_session_factory(engine)() as s:
        dep = Deployment(spec="tiny-moe", tp=1, batch_sizes=[1, 2])
        for slot_name, rel, config, shape_name, ms, model in PLAN:
            source = (REPO / "kernels" / "variants" / rel).read_text()
            variant, _ = get_or_create_variant(s, slot=slot_name, language="torch", source=source,
                                               config_space={k: [v] for k, v in config.items()}, constraints=[],
                                               n_points=1, author="alice", agent="agent-x")
            shapes = [sh for sh in get_slot(slot_name).shapes(dep) if shape_name in (None, sh.name)]
            _, run_ids = create_job(s, variant=variant, deployment=dep.model_dump(mode="json"), model_name=model,
                                    hardware="cpu", configs_requested=[config], shape_filter=None, submitted_by="alice",
                                    plan=[PlannedRun(config, ConfigSpace.canonical(config), sh, m)
                                          for sh in shapes for m in ms],
                                    queued_lease_seconds=3600)
            for rid in run_ids:
                run = s.get(Run, rid)
                spec = RunSpec(run_id=rid, slot=slot_name, language="torch", source=source,
                               source_hash=variant.content_hash, config=config, shape=run.shape, m=run.m, seed=run.seed,
                               bench=BenchSettings(min_time_s=0.3))
                assert record_result(s, rid, evaluate(spec, data_dir=data_dir))
    engine.dispose()
    return path


def _factory(path: Path) -> sessionmaker[Session]:
    return make_session_factory(make_engine(f"sqlite:///{path}"))


def _copy(db: Path, tmp_path: Path, *sql: str) -> Path:
    """A copy of the database with some evidence broken by plain SQL (what a bad row would look like)."""
    dst = tmp_path / "copy.db"
    src = sqlite3.connect(db)
    out = sqlite3.connect(dst)
    src.backup(out)
    src.close()
    for stmt in sql:
        out.execute(stmt)
    out.commit()
    out.close()
    return dst


@pytest.fixture(scope="session")
def exported(db_path: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    with _factory(db_path)() as s:
        res = export_package(s, hardware="cpu", model=MODEL, out_dir=tmp_path_factory.mktemp("wheel"), allow_partial=False)
    return res.model_dump()


@pytest.fixture(scope="session")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with torch only (no kerneltune, no pip): created once per test session (~15 s).

    This interpreter's pip installs into it (``pip --python``), which skips bootstrapping a pip into
    the venv; --no-compile skips byte-compiling all of torch up front (the modules the tests import
    are compiled on first import, as in any venv)."""
    root = tmp_path_factory.mktemp("venv") / "v"
    assert _run([sys.executable, "-m", "venv", "--without-pip", str(root)]).returncode == 0
    py = root / "bin" / "python"
    p = _pip(py, "install", "-q", "--no-compile", "torch==2.13.0")
    assert p.returncode == 0, p.stderr[-3000:]
    return py


def _pip(py: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """pip of the test interpreter, acting on the environment of ``py``."""
    return _run([sys.executable, "-m", "pip", "--python", str(py), *args])


@pytest.fixture(scope="session")
def installed(venv: Path, exported: dict[str, Any]) -> Path:
    p = _pip(venv, "install", "-q", "--no-deps", "--force-reinstall", exported["wheel_path"])
    assert p.returncode == 0, p.stderr[-3000:]
    return venv


def _py(venv: Path, code: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # -I: no PYTHONPATH, no cwd on sys.path, no user site: kerneltune is unreachable.
    return _run([str(venv), "-I", "-c", textwrap.dedent(code)], cwd=cwd, env=env)


def test_export_contents_and_record(db_path: Path, exported: dict[str, Any]) -> None:
    assert exported["wheel_filename"] == "kerneltune_ls_tiny_moe_cpu-0.1.0-py3-none-any.whl"
    assert exported["entries"] >= 1, "the harness measured no variant beating stock: nothing to export"
    with zipfile.ZipFile(exported["wheel_path"]) as z:
        names = z.namelist()
        pkg = exported["package"]
        manifest = json.loads(z.read(f"{pkg}/manifest.json"))
        table = json.loads(z.read(f"{pkg}/dispatch.json"))
        eps = z.read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
        assert not any(p.is_absolute() for p in map(Path, names))
        assert str(REPO) not in json.dumps(manifest)
    assert "[vllm.general_plugins]" in eps and f"{pkg}.plugin:register" in eps
    assert manifest["service"]["git_commit"] and manifest["hardware"]["hardware_class"] == "cpu"
    with _factory(db_path)() as s:
        variants = {v.content_hash: v for v in s.scalars(select(Variant))}
        for entry in manifest["entries"]:
            module = entry["module"]
            src = z_read(exported["wheel_path"], f"{pkg}/kernels/{module}.py")
            v = variants[manifest["variants"][module]["content_hash"]]
            assert src == v.source and module == f"v_{v.content_hash[:16]}"
            w = entry["evidence"]["winner"]
            run = s.get(Run, w["run_id"])
            assert w["median_us"] == run.median_us and w["speedup_ci_lo"] == run.speedup_ci_lo > 1.0
            assert len(w["check_trials"]) >= 2 and all(isinstance(t["seed"], int) for t in w["check_trials"])
            assert entry["evidence"]["fingerprint"]["hardware_class"] == "cpu"
            assert table["slots"][entry["slot"]][entry["shape_key"]]["buckets"][entry["bucket"]]["module"] == module
        rows = s.scalars(select(ExportRecord).where(ExportRecord.sha256 == exported["sha256"])).all()
        assert rows and rows[0].wheel_filename == exported["wheel_filename"] and rows[0].entries == exported["entries"]


def test_export_names_the_buckets_never_timed(exported: dict[str, Any]) -> None:
    # moe_experts was timed at M = 1, 2 and add_rmsnorm at M = 1: every other bucket of the default batch sizes
    # (1-64) runs stock in the package without a verdict, and the export says so per shape
    gaps: dict[str, list[str]] = {}
    for p in exported["untuned"]:
        gaps.setdefault(p["slot"], []).append(p["bucket"])
        assert "never timed" in p["reason"]
    assert gaps["moe_experts"] == ["3-4", "5-8", "9-16", "17-32", "33-64"]
    assert gaps["add_rmsnorm"] == ["2", "3-4", "5-8", "9-16", "17-32", "33-64"]
    assert exported["unchecked"] == []  # each tuned bucket here is one M, and its run checked it


def z_read(wheel: str, name: str) -> str:
    with zipfile.ZipFile(wheel) as z:
        return z.read(name).decode()


def test_same_db_gives_same_wheel(db_path: Path, exported: dict[str, Any], tmp_path: Path) -> None:
    with _factory(db_path)() as s:
        again = export_package(s, hardware="cpu", model=MODEL, out_dir=tmp_path)
        n = s.scalar(select(func.count()).select_from(ExportRecord))
    assert again.sha256 == exported["sha256"]
    assert Path(again.wheel_path).read_bytes() == Path(exported["wheel_path"]).read_bytes()
    assert n >= 2  # both exports recorded


def test_installed_wheel_dispatches_and_selftests(installed: Path, exported: dict[str, Any], tmp_path: Path) -> None:
    pkg = exported["package"]
    p = _py(installed, f"""
        import importlib.util, json, os, torch
        assert importlib.util.find_spec("kernels") is None and importlib.util.find_spec("workers") is None
        import {pkg} as P
        from {pkg} import reference as R
        D = importlib.import_module("{pkg}.dispatch")
        table = D.dispatch_table()
        seen = []
        for slot, shapes in table["slots"].items():
            sem = R.semantics(slot)
            for key, spec in shapes.items():
                dims, dt = spec["shape"]["dims"], R.DTYPES[spec["shape"]["dtype"]]
                for lo, hi in table["buckets"]:
                    for m in sorted({{lo, hi}}):
                        c = P.explain(slot, key, m)
                        entry = spec["buckets"].get(D.batch_bucket(m))
                        want = "tuned" if entry and not entry.get("stock") else "stock"
                        assert c.kind == want, (slot, key, m, c)
                        if m > 64:
                            continue  # beyond the tuned range the fallback is stock torch: checked at the bounds below
                        fn = P.dispatch(slot, key, m)
                        inp = sem.make_inputs(dims, dt, m, 1234 + m, torch.device("cpu"))
                        out = sem.alloc_outputs(dims, dt, m, torch.device("cpu"))
                        R.poison(out)
                        fn(**inp, **out)
                        ok, why, _ = sem.check(dims, dt, out, sem.reference(dims, inp))
                        assert ok, (slot, key, m, why)
                        seen.append([slot, key, m, c.kind])
        # pdl: a kernel that cannot be chained (a torch variant; no GPU) is built plainly and is still right
        slot, key, m, _ = next(s for s in seen if s[3] == "tuned")
        assert not P.chainable(P.explain(slot, key, m))
        spec = table["slots"][slot][key]["shape"]
        sem = R.semantics(slot)
        dims, dt = spec["dims"], R.DTYPES[spec["dtype"]]
        inp = sem.make_inputs(dims, dt, m, 99, torch.device("cpu"))
        out = sem.alloc_outputs(dims, dt, m, torch.device("cpu"))
        R.poison(out)
        P.dispatch(slot, key, m, pdl=1)(**inp, **out)
        assert sem.check(dims, dt, out, sem.reference(dims, inp))[0]
        for bad in (lambda: P.dispatch(slot, key, m, pdl=3), lambda: D.pdl_level()):
            os.environ["KT_LS_PDL"] = "yes"
            try:
                bad()
                raise AssertionError("accepted")
            except ValueError:
                pass
        os.environ["KT_LS_PDL"] = "2"
        assert D.pdl_level() == 2
        print(json.dumps(seen))
    """, tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    seen = json.loads(p.stdout)
    assert any(k == "tuned" for *_, k in seen) and any(k == "stock" for *_, k in seen)
    st = _run([str(installed), "-I", "-m", f"{pkg}.selftest", "--json", "--rounds", "5"], cwd=tmp_path)
    assert st.returncode == 0, st.stdout[-3000:] + st.stderr[-3000:]
    rep = json.loads(st.stdout)
    assert rep["failed"] == 0 and len(rep["entries"]) == exported["entries"]
    assert all(e["status"] == "pass" and e["speedup_vs_stock"] and len(e["seeds"]) >= 2 for e in rep["entries"])
    # --slot re-checks one slot's entries only; a slot the package has no entries for is a usage error
    slot = rep["entries"][0]["slot"]
    one = _run([str(installed), "-I", "-m", f"{pkg}.selftest", "--json", "--rounds", "2", "--slot", slot], cwd=tmp_path)
    assert one.returncode == 0, one.stdout[-3000:] + one.stderr[-3000:]
    only = json.loads(one.stdout)["entries"]
    assert only and {e["slot"] for e in only} == {slot} and len(only) < len(rep["entries"])
    assert len(only) == sum(e["slot"] == slot for e in rep["entries"])
    bad = _run([str(installed), "-I", "-m", f"{pkg}.selftest", "--slot", "no_such_slot"], cwd=tmp_path)
    assert bad.returncode == 2 and "no tuned entries for ['no_such_slot']" in bad.stderr

    # --every-m checks the whole bucket; these buckets are one M each, so it adds nothing here
    every = _run([str(installed), "-I", "-m", f"{pkg}.selftest", "--json", "--rounds", "2", "--every-m"], cwd=tmp_path)
    assert every.returncode == 0, every.stdout[-3000:] + every.stderr[-3000:]
    assert all(e["checked_ms"] == [int(m) for m in e["speedup_vs_stock"]] for e in json.loads(every.stdout)["entries"])


def test_every_m_catches_a_kernel_wrong_at_an_m_its_bucket_serves_but_no_run_measured(
        installed: Path, exported: dict[str, Any], tmp_path: Path) -> None:
    # A copy of the installed package whose add_rmsnorm entry serves bucket 3-4 from a run at M = 4, with a kernel wrong
    # at M = 3: dispatch would run it there; the plain self-test (the measured M) passes it, --every-m fails it.
    pkg = exported["package"]
    site = tmp_path / "site"
    shutil.copytree(next(installed.parents[1].glob(f"lib/python3*/site-packages/{pkg}")), site / pkg)
    table = json.loads((site / pkg / "dispatch.json").read_text())
    shapes = table["slots"]["add_rmsnorm"]
    key = next(iter(shapes))
    entry = shapes[key]["buckets"].pop("1")
    shapes[key]["buckets"]["3-4"] = {**entry, "ms": [4]}
    (site / pkg / "dispatch.json").write_text(json.dumps(table))
    module = site / pkg / "kernels" / f"{entry['module']}.py"
    module.write_text(module.read_text() + WRONG_AT_3)
    run = f"import sys; sys.path.insert(0, {str(site)!r}); from {pkg} import selftest; sys.exit(selftest.main(sys.argv[1:]))"
    args = ["--json", "--rounds", "2", "--slot", "add_rmsnorm"]
    plain = _run([str(installed), "-I", "-c", run, *args], cwd=tmp_path)
    assert plain.returncode == 0, plain.stdout[-3000:] + plain.stderr[-3000:]
    assert [e["checked_ms"] for e in json.loads(plain.stdout)["entries"]] == [[4]]
    # dispatch runs the kernel at M = 3 too, unless told to keep to the checked M
    explain = (f"import sys; sys.path.insert(0, {str(site)!r}); import {pkg} as P; "
               f"print(' '.join(P.explain('add_rmsnorm', {key!r}, m).kind for m in (3, 4)))")
    assert _run([str(installed), "-I", "-c", explain], cwd=tmp_path).stdout.split() == ["tuned", "tuned"]
    strict = _run([str(installed), "-I", "-c", explain], cwd=tmp_path, env={**os.environ, "KT_LS_CHECKED_M_ONLY": "1"})
    assert strict.stdout.split() == ["stock", "tuned"], strict.stderr[-2000:]
    every = _run([str(installed), "-I", "-c", run, *args, "--every-m"], cwd=tmp_path)
    assert every.returncode == 1, every.stdout[-3000:] + every.stderr[-3000:]
    (got,) = json.loads(every.stdout)["entries"]
    assert got["status"] == "fail" and got["detail"].startswith("M=3 ") and got["checked_ms"] == [], got


STANDIN = {
    "vllm/__init__.py": "",
    "vllm/model_executor/__init__.py": "",
    "vllm/model_executor/layers/__init__.py": "",
    "vllm/model_executor/custom_op.py": '''
        import torch
        op_registry_oot = {}
        class _Registering(torch.nn.Module):
            def __new__(cls, *a, **k):
                return super().__new__(op_registry_oot.get(cls.__name__, cls))
            @classmethod
            def register_oot(cls, _decorated=None, name=None):
                def deco(c):
                    reg = name if name is not None else cls.__name__
                    assert reg not in op_registry_oot, reg
                    c.name = reg
                    op_registry_oot[reg] = c
                    return c
                return deco if _decorated is None else deco(_decorated)
        class CustomOp(_Registering):
            pass
        class PluggableLayer(_Registering):
            pass
    ''',
    "vllm/model_executor/layers/layernorm.py": '''
        import torch
        from vllm.model_executor.custom_op import CustomOp
        class RMSNorm(CustomOp):
            def __init__(self, hidden_size, eps):
                super().__init__()
                self.variance_epsilon = eps
                self.weight = torch.nn.Parameter(torch.ones(hidden_size, dtype=torch.bfloat16), requires_grad=False)
            def forward_cuda(self, x, residual=None):
                raise AssertionError("stock path taken")
    ''',
    "vllm/model_executor/layers/linear.py": '''
        import torch
        from vllm.model_executor.custom_op import PluggableLayer
        class UnquantizedLinearMethod: pass
        class _Linear(PluggableLayer):
            def __init__(self, n, k):
                super().__init__()
                self.weight = torch.nn.Parameter(torch.randn(n, k, dtype=torch.bfloat16) / k ** 0.5, requires_grad=False)
                self.bias, self.return_bias, self.quant_method = None, True, UnquantizedLinearMethod()
            def forward(self, x):
                return x @ self.weight.t(), None
        class ReplicatedLinear(_Linear): pass
        class ColumnParallelLinear(_Linear):
            gather_output = False
    ''',
}


def test_plugin_registration(installed: Path, exported: dict[str, Any], tmp_path: Path) -> None:
    for rel, text in STANDIN.items():
        (tmp_path / "standin" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "standin" / rel).write_text(textwrap.dedent(text))
    pkg = exported["package"]
    probe = f"""
        import json, sys
        if sys.argv[-1] == "standin":
            sys.path.insert(0, {str(tmp_path / 'standin')!r})
        from importlib.metadata import entry_points
        (ep,) = [e for e in entry_points(group="vllm.general_plugins") if e.value.startswith("{pkg}.")]
        rep = ep.load()()
        out = {{"report": rep}}
        if sys.argv[-1] == "standin":
            import torch
            from vllm.model_executor.custom_op import op_registry_oot
            from vllm.model_executor.layers.layernorm import RMSNorm
            import importlib
            from {pkg} import reference as R
            D = importlib.import_module("{pkg}.dispatch")
            out["oot"] = sorted(op_registry_oot)
            for e in D.tuned_entries():
                if e["slot"] == "add_rmsnorm":
                    d = D.dispatch_table()["slots"]["add_rmsnorm"][e["shape_key"]]["shape"]["dims"]
                    layer = RMSNorm(d["H"], d["eps"])
                    assert type(layer).__name__ == "LatencySpecializedRMSNorm"
                    inp = R.semantics("add_rmsnorm").make_inputs(d, torch.bfloat16, e["ms"][0], 7, torch.device("cpu"))
                    layer.weight.data.copy_(inp["weight"])
                    o, r = layer.forward_cuda(inp["x"], inp["residual"])
                    ok, why, _ = R.semantics("add_rmsnorm").check(d, torch.bfloat16, {{"out": o, "residual_out": r}},
                                                                R.semantics("add_rmsnorm").reference(d, inp))
                    assert ok, why
        print(json.dumps(out))
    """
    import os
    base = {k: v for k, v in os.environ.items() if k != "VLLM_DECODE_BACKEND"}
    off = _run([str(installed), "-I", "-c", textwrap.dedent(probe), "none"], cwd=tmp_path, env=base)
    assert off.returncode == 0, off.stderr[-3000:]
    rep = json.loads(off.stdout)["report"]
    assert not rep["enabled"] and "switch is off" in rep["reason"] and not rep["registered"]
    on_env = {**base, "VLLM_DECODE_BACKEND": "latency_specialized"}
    no_vllm = _run([str(installed), "-I", "-c", textwrap.dedent(probe), "none"], cwd=tmp_path, env=on_env)
    rep = json.loads(no_vllm.stdout)["report"]
    assert rep["enabled"] and "not installed" in rep["vllm"]
    on = _run([str(installed), "-I", "-c", textwrap.dedent(probe), "standin"], cwd=tmp_path, env=on_env)
    assert on.returncode == 0, on.stderr[-3000:]
    res = json.loads(on.stdout)
    tuned = {e["slot"] for e in json.loads(z_read(exported["wheel_path"], f"{pkg}/manifest.json"))["entries"]}
    want = ({"RMSNorm"} if "add_rmsnorm" in tuned else set()) | (
        {"ReplicatedLinear", "ColumnParallelLinear"} if "dense_gemm" in tuned else set())
    assert set(res["oot"]) == want
    assert any("moe_experts" in line for line in res["report"]["not_hooked"]) == ("moe_experts" in tuned)
    assert res["report"]["pdl"] == 0   # KT_LS_PDL unset: the hooks build their kernels plainly
    chained = _run([str(installed), "-I", "-c", textwrap.dedent(probe), "standin"], cwd=tmp_path,
                   env={**on_env, "KT_LS_PDL": "1"})
    assert chained.returncode == 0 and json.loads(chained.stdout)["report"]["pdl"] == 1, chained.stderr[-3000:]
    bad = _run([str(installed), "-I", "-c", textwrap.dedent(probe), "standin"], cwd=tmp_path,
               env={**on_env, "KT_LS_PDL": "on"})
    assert bad.returncode != 0 and "KT_LS_PDL='on'" in bad.stderr
    # Other hardware: the manifest says cpu, so pretending to be elsewhere is not possible here;
    # a mismatching manifest is what the refusal tests below cover on the export side.


def test_refuses_when_nothing_beats_stock(db_path: Path, tmp_path: Path) -> None:
    with _factory(db_path)() as s, pytest.raises(ExportRefused) as exc:
        export_package(s, hardware="cpu", model=DENSE_MODEL, out_dir=tmp_path)
    assert "nothing beats stock" in str(exc.value) and "q_b_proj" in str(exc.value)
    with _factory(db_path)() as s, pytest.raises(ExportRefused, match="no winners"):
        export_package(s, hardware="h200", model=MODEL, out_dir=tmp_path)


def test_refuses_evidence_from_other_hardware(db_path: Path, tmp_path: Path) -> None:
    db = _copy(db_path, tmp_path, "UPDATE device_fingerprints SET hardware_class = 'h200'")
    with _factory(db)() as s, pytest.raises(ExportRefused) as exc:
        export_package(s, hardware="cpu", model=MODEL, out_dir=tmp_path)
    assert "measured on 'h200'" in str(exc.value) and not list(tmp_path.glob("*.whl"))


def test_lacking_evidence_refused_then_partial(db_path: Path, exported: dict[str, Any], tmp_path: Path) -> None:
    assert exported["entries"] >= 2, "the harness measured fewer than two winning buckets: cannot test partial export"
    with _factory(db_path)() as s:
        victim = s.scalar(select(Run.id).where(Run.slot == "moe_experts", Run.m == 1))
    db = _copy(db_path, tmp_path, f"UPDATE runs SET bench = NULL WHERE id = '{victim}'")
    with _factory(db)() as s:
        with pytest.raises(ExportRefused) as exc:
            export_package(s, hardware="cpu", model=MODEL, out_dir=tmp_path)
        assert victim in str(exc.value) and "lacks timing evidence" in str(exc.value)
        res = export_package(s, hardware="cpu", model=MODEL, out_dir=tmp_path, allow_partial=True)
        row = s.get(ExportRecord, res.export_id)
    assert res.partial and res.entries == exported["entries"] - 1 and [p.bucket for p in res.skipped] == ["1"]
    assert row.partial and row.skipped[0]["reason"].startswith(f"run {victim}")
    man = json.loads(z_read(res.wheel_path, f"{res.package}/manifest.json"))
    assert man["partial"] and man["skipped"][0]["slot"] == "moe_experts"


def test_fused_moe_configs_match_vllm_format(tmp_path: Path) -> None:
    space = json.loads(json.dumps({"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 64, "BLOCK_SIZE_K": 128, "GROUP_SIZE_M": 1,
                                   "num_warps": 4, "num_stages": 3}))
    src = "VLLM_FUSED_MOE_CONFIG_KEYS = {'BLOCK_SIZE_M': 'BM', 'BLOCK_SIZE_N': 'BN', 'BLOCK_SIZE_K': 'BK', " \
          "'GROUP_SIZE_M': 'G', 'num_warps': 'num_warps', 'num_stages': 'num_stages'}\n"
    mapping = fmc.declared_mapping(src, set())
    cfg = {"BM": 16, "BN": 64, "BK": 128, "G": 1, "num_warps": 4, "num_stages": 3}
    assert fmc.vllm_params(cfg, mapping) == space
    assert fmc.declared_mapping("CONFIG_SPACE = {}\n", set(space)) == {k: k for k in fmc.REQUIRED_KEYS}
    assert fmc.declared_mapping((REPO / "kernels/variants/torch/moe_experts_gather_bmm.py").read_text(),
                                {"intermediate", "token_chunk"}) is None
    dims = get_slot("moe_experts").shapes(Deployment(spec="kimi-k2-like", tp=8))[0].dims
    name, doc = fmc.render(dims["E"], dims["I"], "NVIDIA H200 NVL", "bfloat16", {1: space, 16: {**space, "num_warps": 8}}, "3.6.0")
    assert name == "E=384,N=256,device_name=NVIDIA_H200.json" and list(doc)[:2] == ["1", "16"]
    (tmp_path / name).write_text(json.dumps(doc))
    assert fmc.validate_config_dir(tmp_path) == {name: []}
    bad = fmc.validate_config_file("E=384,N=256,device=H200.json",
                                   {"1.5": space, "2": {**space, "BLOCK_SIZE_N": 48}, "4": {"num_warps": 4}, "8": {**space, "foo": 1}})
    joined = "; ".join(bad)
    for needle in ("file name", "'1.5'", "not a power of two", "[4] lacks BLOCK_SIZE_M", "unknown parameter 'foo'"):
        assert needle in joined
    with pytest.raises(ValueError, match="lacks"):
        fmc.declared_mapping("VLLM_FUSED_MOE_CONFIG_KEYS = ['BLOCK_SIZE_M']\n", set())


def test_package_reference_matches_kerneltune_slots() -> None:
    """The package's copied semantics give the same inputs, stock outputs and references as kernels/slots."""
    sys.path.insert(0, str(REPO / "export" / "templates"))
    try:
        import reference as pkg_ref  # the template module, imported standalone
    finally:
        sys.path.pop(0)
    dep = Deployment(spec="tiny-moe", tp=1)
    cpu = torch.device("cpu")
    for name in pkg_ref.SLOTS:
        slot, sem = get_slot(name), pkg_ref.semantics(name)
        for shape in slot.shapes(dep):
            dt = slot.dtype(shape)
            a, b = slot.make_inputs(shape, 3, 99, cpu), sem.make_inputs(shape.dims, dt, 3, 99, cpu)
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
            ra, rb = slot.reference(shape, a), sem.reference(shape.dims, b)
            assert all(torch.equal(ra[k], rb[k]) for k in ra), name
            oa, ob = slot.alloc_outputs(shape, 3, cpu), sem.alloc_outputs(shape.dims, dt, 3, cpu)
            slot.stock(shape, 3)(**a, **oa)
            sem.stock(shape.dims)(**b, **ob)
            assert all(torch.equal(oa[k], ob[k]) for k in oa), name
            assert sem.check(shape.dims, dt, ob, rb)[0] and slot.check(shape, ob, ra, a).passed, name
            pkg_ref.poison(ob)
            assert not sem.check(shape.dims, dt, ob, rb)[0], f"{name}: poisoned outputs must fail"


def test_package_inputs_match_kerneltune_where_large_tensors_are_drawn_on_the_device(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU both draw a tensor of >= DEVICE_DRAW_MIN elements on the device (the package drew every tensor on
    the host: minutes per MoE input set in the exported self-test, and inputs that differed from kerneltune's for
    the same seed). Here the device path is forced on the CPU, for every tensor of >= 64 elements, in both."""
    from kernels.slots import base

    sys.path.insert(0, str(REPO / "export" / "templates"))
    try:
        import reference as pkg_ref
    finally:
        sys.path.pop(0)
    assert pkg_ref.DEVICE_DRAW_MIN == base.DEVICE_DRAW_MIN
    cpu = torch.device("cpu")
    drawn: list[int] = []

    def forced(device: torch.device, numel: int) -> bool:
        drawn.append(numel)
        return numel >= 64

    monkeypatch.setattr(base, "draws_on_device", forced)
    monkeypatch.setattr(pkg_ref, "_draws_on_device", forced)
    dep = Deployment(spec="tiny-moe", tp=1)
    for name in pkg_ref.SLOTS:
        slot, sem = get_slot(name), pkg_ref.semantics(name)
        for shape in slot.shapes(dep):
            a = slot.make_inputs(shape, 3, 99, cpu)
            b = sem.make_inputs(shape.dims, slot.dtype(shape), 3, 99, cpu)
            assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
    assert any(n >= 64 for n in drawn) and any(n < 64 for n in drawn)  # both paths ran
    # and the device path is not the host path: the same seed gives other values
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    monkeypatch.setattr(base, "draws_on_device", lambda device, numel: False)
    host = base.randn((256,), g1, cpu, torch.float32)
    monkeypatch.setattr(base, "draws_on_device", lambda device, numel: True)
    assert not torch.equal(host, base.randn((256,), g2, cpu, torch.float32))
