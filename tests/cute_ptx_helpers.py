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
