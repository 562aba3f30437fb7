"""What the CuTe GEMV tests share: a dense_gemm shape, a variant file loaded as the worker loads it (with its
own compile cache), and the sm_90a PTX its CPU build stops at (the backend raises NeedsDevice with it)."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import torch

from kernels.backends import compile_cache
from kernels.backends.base import NeedsDevice, load_module

ROOT = Path(__file__).resolve().parent.parent
FUSED_QKV_A = {"N": 2112, "K": 7168}
O_PROJ = {"N": 7168, "K": 1024}


def shape(m: int, N: int, K: int) -> dict:  # noqa: N803 - the dims by their slot names
    return {"N": N, "K": K, "M": m, "slot": "dense_gemm", "name": "test", "dtype": "bfloat16"}


def load_variant(variant: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setenv(compile_cache.ENV, str(tmp_path / "cache"))
    return load_module(variant.read_text(), f"kt_test_{variant.stem}_{tmp_path.name}", str(tmp_path / variant.name))


def ptx_of(mod: ModuleType, config: dict, shp: dict) -> str:
    from kernels.backends.cute_backend import CuteBackend

    with pytest.raises(NeedsDevice) as built:
        CuteBackend().build(mod, config, shp, torch.device("cpu"))
    return built.value.ptx


def plan_runs(plan_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[tuple]:
    """(file, shape, M, config items) of every run a bench/plans/<plan_name>.json asks for, each config held to
    what the service holds it to before any device time: every parameter of the variant's CONFIG_SPACE set
    (service/routers/jobs.py), each value one the space lists, and the variant's constraints met for that shape
    and M (its _params raises otherwise)."""
    import json

    from kernels.deployment import Deployment
    from kernels.slots.dense_gemm import DenseGemm

    monkeypatch.setenv(compile_cache.ENV, str(tmp_path / "cache"))
    plan = json.loads((ROOT / "bench/plans" / f"{plan_name}.json").read_text())
    shapes = {s.name: s for s in DenseGemm().shapes(Deployment(**plan["deployment"]))}
    mods: dict[str, ModuleType] = {}
    seen = []
    for item in plan["variants"]:
        f = item["file"]
        if f not in mods:
            mods[f] = load_module((ROOT / f).read_text(), f"kt_test_plan_{len(mods)}_{tmp_path.name}",
                                  str(tmp_path / Path(f).name))
        space = mods[f].CONFIG_SPACE
        for name in item["shapes"]:
            for m in item["batch_sizes"]:
                for config in item["configs"]:
                    assert set(config) == set(space), config
                    assert all(v in space[k] for k, v in config.items()), config
                    mods[f]._params(config, shapes[name].as_build_arg(m))
                    seen.append((f, name, m, tuple(sorted(config.items()))))
    return seen
