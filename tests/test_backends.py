"""triton and cute backends on the CPU: AOT compile for sm_90a, claims, interpreter runs, errors, cache.

Interpreter runs happen in a child process with TRITON_INTERPRET=1 set before triton is imported
(that is how the sandbox runs them); everything else runs in this process in compiled mode.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from kernels.backends import compile_cache
from kernels.backends.base import CompileError, NeedsDevice, load_module

ROOT = Path(__file__).resolve().parent.parent
TRITON_VARIANT = ROOT / "kernels/variants/triton/dense_gemm_splitk.py"
CUTE_VARIANT = ROOT / "kernels/variants/cute/dense_gemm_warp_gemv.py"
CPU = torch.device("cpu")


def shape(m: int, n: int = 96, k: int = 256) -> dict:
    return {"N": n, "K": k, "M": m, "slot": "dense_gemm", "name": "test", "dtype": "bfloat16"}


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv(compile_cache.ENV, str(root))
    monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", "1")
    return root


def load_variant(path: Path, tmp_path: Path, edit: tuple[str, str] | None = None, name: str = "variant"):
    src = path.read_text()
    if edit is not None:
        assert edit[0] in src, f"test edit target {edit[0]!r} not in {path.name}"
        src = src.replace(edit[0], edit[1], 1)
    return load_module(src, f"kt_test_{name}_{tmp_path.name}", str(tmp_path / f"{name}.py")), src


# ---------------------------------------------------------------- triton

SPLIT2 = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 64, "SPLIT_K": 2, "num_warps": 4, "num_stages": 3}
SPLIT1 = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 1, "num_warps": 4, "num_stages": 2}
RAGGED = {"BLOCK_M": 16, "BLOCK_N": 32, "BLOCK_K": 64, "SPLIT_K": 3, "num_warps": 2, "num_stages": 2}


@pytest.mark.parametrize("config,m,n,k", [
    (SPLIT2, 1, 2112, 7168),
    ({**SPLIT2, "REDUCE": "last_cta"}, 1, 2112, 7168),  # one launch: the arrival counter's acq_rel atomic
    ({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 1, "num_warps": 4, "num_stages": 4}, 64, 1536, 1536),
])
def test_triton_aot_sm90a_ptx_shows_claims(config: dict, m: int, n: int, k: int, tmp_path: Path) -> None:
    mod, _ = load_variant(TRITON_VARIANT, tmp_path)
    ptx = mod.compile_ptx(config, shape(m, n, k), "sm_90a")
    assert ".target sm_90a" in ptx
    claimed = mod.claims(config, shape(m, n, k))["ptx_contains"]
    assert claimed and all(c in ptx for c in claimed), claimed


def test_triton_constraints_reject_bad_config(tmp_path: Path) -> None:
    mod, _ = load_variant(TRITON_VARIANT, tmp_path)
    with pytest.raises(ValueError, match="BLOCK_M >= M"):
        mod.build({**SPLIT1, "BLOCK_M": 16}, shape(32))


INTERP_CHILD = textwrap.dedent("""
    import json, os, sys
    assert os.environ["TRITON_INTERPRET"] == "1"
    from kernels.backends import compile_cache
    compile_cache.configure_language_caches()
    import torch
    from kernels.backends.base import load_module
    from kernels.backends.triton_backend import TritonBackend
    variant, tmp, cases = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    mod = load_module(open(variant).read(), "kt_child_variant", os.path.join(tmp, "child_variant.py"))
    backend, rows = TritonBackend(), []
    for config, m, n, k in cases:
        shp = {"N": n, "K": k, "M": m, "slot": "dense_gemm", "name": "test", "dtype": "bfloat16"}
        built = backend.build(mod, config, shp, torch.device("cpu"))
        g = torch.Generator().manual_seed(m * 1000 + n)
        rel, finite, same = 0.0, True, True
        # the one-launch reduction keeps arrival counters between calls: call it twice, they must be reset
        for _ in range(2 if config.get("REDUCE") == "last_cta" else 1):
            x = torch.randn(m, k, generator=g).bfloat16()
            w = (torch.randn(n, k, generator=g) / k ** 0.5).bfloat16()
            x0, w0 = x.clone(), w.clone()
            out = torch.full((m, n), float("nan"), dtype=torch.bfloat16)  # every element must be written
            built.fn(x=x, w=w, out=out)
            ref = x.double() @ w.double().t()
            rel = max(rel, ((out.double() - ref).norm() / ref.norm()).item())
            finite, same = finite and bool(torch.isfinite(out).all()), same and bool(torch.equal(x, x0) and torch.equal(w, w0))
        rows.append({"config": config, "m": m, "rel": rel, "finite": finite, "inputs_same": same,
                     "cache_hit": built.cache_hit, "ptx": bool(built.ptx and ".target sm_90a" in built.ptx)})
    print("RESULT " + json.dumps(rows))
""")


def run_interp_child(cases: list, tmp_path: Path) -> list[dict]:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", INTERP_CHILD, str(TRITON_VARIANT), str(tmp_path), json.dumps(cases)],
                          env=env, capture_output=True, text=True, timeout=600, cwd=ROOT)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT "):])


def test_triton_interpreter_matches_torch_and_cache_persists(tmp_path: Path, private_cache: Path) -> None:
    cases = [(SPLIT2, 1, 96, 256), (SPLIT2, 3, 96, 256), (SPLIT2, 16, 96, 256), (SPLIT1, 3, 64, 256),
             (RAGGED, 5, 80, 320),  # K not a multiple of BLOCK_K * SPLIT_K, N not of BLOCK_N
             (SPLIT2, 3, 96, 256),  # same key again: a hit in the same process
             # the one-launch reduction: the last split of each tile sums the partials and resets its
             # counter (two calls per build), on an even and on a ragged split (K and N)
             ({**SPLIT2, "REDUCE": "last_cta"}, 3, 96, 256), ({**RAGGED, "REDUCE": "last_cta"}, 5, 80, 320)]
    rows = run_interp_child(cases, tmp_path)
    for row in rows:
        assert row["finite"] and row["rel"] <= 1e-2 and row["inputs_same"] and row["ptx"], row
    assert [r["cache_hit"] for r in rows] == [False, False, False, False, False, True, False, False]
    # A new process with the same cache root: hit for a built key, miss for a new config.
    other = {**SPLIT1, "BLOCK_N": 32}
    again = run_interp_child([(SPLIT2, 16, 96, 256), (other, 16, 96, 256)], tmp_path)
    assert [r["cache_hit"] for r in again] == [True, False]
    assert all(r["rel"] <= 1e-2 for r in again)
    assert (private_cache / "triton").is_dir() and any((private_cache / "records").rglob("*.ptx"))


def test_triton_kernel_error_names_source_line(tmp_path: Path) -> None:
    from kernels.backends.triton_backend import TritonBackend

    bad_line = "            acc += tl.dot(x, tl.trans(w))"
    mod, src = load_variant(TRITON_VARIANT, tmp_path, (bad_line, "            acc += tl.dott(x, tl.trans(w))"), "bad")
    expected = src.splitlines().index("            acc += tl.dott(x, tl.trans(w))") + 1
    with pytest.raises(CompileError) as err:
        TritonBackend().build(mod, SPLIT2, shape(3), CPU)
    assert err.value.line == expected, (err.value.line, str(err.value))
    assert "dott" in str(err.value) or "dott" in err.value.log


def test_triton_missing_claim_is_compile_error(tmp_path: Path) -> None:
    from kernels.backends.triton_backend import TritonBackend

    mod, _ = load_variant(TRITON_VARIANT, tmp_path, ('    out = ["wgmma.mma_async" if wgmma else "mma.sync.aligned"]',
                                                     '    out = ["tcgen05.mma"]'), "claims")
    with pytest.raises(CompileError, match="PTX lacks claimed instruction tcgen05.mma"):
        TritonBackend().build(mod, SPLIT2, shape(3), CPU)


# ---------------------------------------------------------------- cute

CUTE_CFG = {"ROWS_PER_WARP": 2, "WARPS_PER_CTA": 4, "UNROLL": 2}


def test_cute_compiles_for_sm90a_and_needs_device(tmp_path: Path) -> None:
    from kernels.backends.cute_backend import CuteBackend

    mod, _ = load_variant(CUTE_VARIANT, tmp_path)
    with pytest.raises(NeedsDevice) as first:
        CuteBackend().build(mod, CUTE_CFG, shape(3, 256, 512), CPU)
    ptx = first.value.ptx
    assert ptx and ".target sm_90a" in ptx
    assert all(c in ptx for c in mod.CLAIMS["ptx_contains"])
    assert first.value.cache_hit is False
    with pytest.raises(NeedsDevice) as second:  # same key: the PTX comes from the cache
        CuteBackend().build(mod, CUTE_CFG, shape(3, 256, 512), CPU)
    assert second.value.cache_hit is True and second.value.ptx == ptx
    with pytest.raises(NeedsDevice) as third:  # another config: a miss
        CuteBackend().build(mod, {**CUTE_CFG, "ROWS_PER_WARP": 1}, shape(3, 256, 512), CPU)
    assert third.value.cache_hit is False


def test_cute_broken_kernel_is_compile_error(tmp_path: Path) -> None:
    from kernels.backends.cute_backend import CuteBackend

    good = "v = v + cute.arch.shuffle_sync_bfly(v, offset=1 << (4 - i))"
    mod, src = load_variant(CUTE_VARIANT, tmp_path, (good, "v = v + cute.arch.shuffle_sync_butterfly(v, offset=1 << (4 - i))"),
                            "cute_bad")
    expected = next(i for i, ln in enumerate(src.splitlines(), 1) if "shuffle_sync_butterfly" in ln)
    with pytest.raises(CompileError) as err:
        CuteBackend().build(mod, CUTE_CFG, shape(3, 256, 512), CPU)
    assert not isinstance(err.value, NeedsDevice)
    assert "shuffle_sync_butterfly" in str(err.value), str(err.value)
    assert err.value.line == expected, (err.value.line, str(err.value)[:500])


def test_cute_missing_claim_is_compile_error(tmp_path: Path) -> None:
    from kernels.backends.cute_backend import CuteBackend

    mod, _ = load_variant(CUTE_VARIANT, tmp_path, ('CLAIMS = {"ptx_contains": ["ld.global.v4", "shfl.sync.bfly"]}',
                                                   'CLAIMS = {"ptx_contains": ["wgmma.mma_async"]}'), "cute_claims")
    with pytest.raises(CompileError, match="PTX lacks claimed instruction wgmma.mma_async"):
        CuteBackend().build(mod, CUTE_CFG, shape(3, 256, 512), CPU)


# ---------------------------------------------------------------- cache

def test_cache_key_and_records(private_cache: Path) -> None:
    k1 = compile_cache.make_key("src", {"a": 1, "b": 2}, shape(1), "triton", "3.6.0", "sm_90a")
    assert k1 == compile_cache.make_key("src", {"b": 2, "a": 1}, shape(1), "triton", "3.6.0", "sm_90a")
    assert k1 != compile_cache.make_key("src", {"a": 1, "b": 3}, shape(1), "triton", "3.6.0", "sm_90a")
    assert k1 != compile_cache.make_key("src", {"a": 1, "b": 2}, shape(2), "triton", "3.6.0", "sm_90a")
    assert k1 != compile_cache.make_key("src", {"a": 1, "b": 2}, shape(1), "triton", "3.6.0", "sm_100a")
    assert compile_cache.lookup(k1) is None
    compile_cache.store(k1, {"language": "triton"}, ".target sm_90a")
    rec = compile_cache.lookup(k1)
    assert rec is not None and rec.ptx == ".target sm_90a" and rec.meta["language"] == "triton"
