"""vLLM ``general_plugins`` entry point: swap in the tuned kernels when asked to and when they apply.

``register()`` does something only when both hold:
  * the opt-in switch: env ``VLLM_DECODE_BACKEND=latency_specialized``, or ``decode_backend:
    latency_specialized`` in the current vLLM config (as an attribute, or in ``additional_config``);
  * this machine is the hardware of the manifest (GPU class and arch).
Otherwise it logs why and returns. vLLM replaces layers out of tree by class name: a class registered
with ``CustomOp.register_oot(name=X)`` / ``PluggableLayer.register_oot(name=X)`` is instantiated
wherever vLLM builds its in-tree class ``X``. The subclasses below call the tuned kernel only for
inputs that match an exported shape and bucket, and defer to vLLM's own forward for everything else.
MoE entries that map onto vLLM's Triton fused_moe kernel ship as tuned config JSON, enabled by
pointing ``VLLM_TUNED_CONFIG_FOLDER`` at them. ``KT_LS_PDL=1`` builds the hooked kernels that can be chained as
programmatic dependent launches (dispatch's pdl): each fetches its weights while the kernel before it runs.
"""

from __future__ import annotations

import importlib
import logging
import os
from importlib import resources
from typing import Any

import torch

# The package's __init__ re-exports the dispatch() function under the module's name: import the module.
dsp = importlib.import_module(".dispatch", __package__)

logger = logging.getLogger(__name__)
SWITCH_ENV = "VLLM_DECODE_BACKEND"
SWITCH_VALUE = "latency_specialized"
_REGISTERED: dict[str, Any] | None = None


def _vllm_config_switch() -> str | None:
    """decode_backend from the current vLLM config, when vLLM and a config are reachable."""
    try:
        from vllm.config import get_current_vllm_config  # type: ignore[import-not-found]
        cfg = get_current_vllm_config()
    except Exception:  # no vLLM, or no config yet at plugin-load time: the env switch decides
        return None
    value = getattr(cfg, "decode_backend", None)
    if value is None:
        extra = getattr(cfg, "additional_config", None)
        if isinstance(extra, dict):
            value = extra.get("decode_backend")
    return value if isinstance(value, str) else None


def switch_on() -> tuple[bool, str]:
    env = os.environ.get(SWITCH_ENV)
    if env == SWITCH_VALUE:
        return True, f"{SWITCH_ENV}={SWITCH_VALUE}"
    cfg = _vllm_config_switch()
    if cfg == SWITCH_VALUE:
        return True, f"vLLM config decode_backend={SWITCH_VALUE}"
    return False, (f"opt-in switch is off ({SWITCH_ENV}={env!r}, vLLM config decode_backend={cfg!r}); "
                   f"set {SWITCH_ENV}={SWITCH_VALUE} to enable")


def _shape_index(slot: str, dim_names: tuple[str, ...]) -> dict[tuple[Any, ...], str]:
    out = {}
    for key, spec in dsp.dispatch_table()["slots"].get(slot, {}).items():
        dims = spec["shape"]["dims"]
        out[tuple(dims[n] for n in dim_names) + (spec["shape"]["dtype"],)] = key
    return out


_TORCH_DTYPE_NAMES = {torch.bfloat16: "bfloat16", torch.float16: "float16", torch.float32: "float32"}


def _linear_class(base: type, kind: str, pdl: int) -> type:
    index = _shape_index("dense_gemm", ("N", "K"))

    class LatencySpecializedLinear(base):  # type: ignore[misc, valid-type]
        """y = x W^T through the tuned dense_gemm kernel for unquantized, bias-free, local GEMMs."""

        def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            fn = self._kt_kernel(x) if not args and not kwargs else None
            if fn is None:
                return super().forward(x, *args, **kwargs)
            out = torch.empty((x.shape[0], self.weight.shape[0]), device=x.device, dtype=x.dtype)
            fn(x=x, w=self.weight, out=out)
            return (out, None) if getattr(self, "return_bias", True) else out

        def _kt_kernel(self, x: torch.Tensor) -> Any:
            if x.dim() != 2 or getattr(self, "bias", None) is not None or getattr(self, "gather_output", False):
                return None
            if type(getattr(self, "quant_method", None)).__name__ != "UnquantizedLinearMethod":
                return None
            w = self.weight
            if w.dim() != 2 or w.dtype != x.dtype:
                return None
            key = index.get((w.shape[0], w.shape[1], _TORCH_DTYPE_NAMES.get(x.dtype)))
            if key is None:
                return None
            choice = dsp.explain("dense_gemm", key, x.shape[0])
            return dsp.dispatch("dense_gemm", key, x.shape[0], pdl) if choice.kind == "tuned" else None

    LatencySpecializedLinear.__name__ = LatencySpecializedLinear.__qualname__ = f"LatencySpecialized{kind}"
    return LatencySpecializedLinear


def _rmsnorm_class(base: type, pdl: int) -> type:
    index = _shape_index("add_rmsnorm", ("H", "eps"))

    class LatencySpecializedRMSNorm(base):  # type: ignore[misc, valid-type]
        """Fused residual add + RMSNorm through the tuned add_rmsnorm kernel (the residual path only)."""

        def forward_cuda(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> Any:
            fn = self._kt_kernel(x, residual)
            if fn is None:
                return super().forward_cuda(x, residual)
            out, res_out = torch.empty_like(x), torch.empty_like(x)
            fn(x=x, residual=residual, weight=self.weight, out=out, residual_out=res_out)
            return out, res_out

        def _kt_kernel(self, x: torch.Tensor, residual: torch.Tensor | None) -> Any:
            if residual is None or x.dim() != 2 or getattr(self, "variance_size_override", None) is not None:
                return None
            if not getattr(self, "has_weight", True):
                return None
            key = index.get((x.shape[1], float(self.variance_epsilon), _TORCH_DTYPE_NAMES.get(x.dtype)))
            if key is None:
                return None
            choice = dsp.explain("add_rmsnorm", key, x.shape[0])
            return dsp.dispatch("add_rmsnorm", key, x.shape[0], pdl) if choice.kind == "tuned" else None

    return LatencySpecializedRMSNorm


def _fused_moe_folder() -> str | None:
    folder = resources.files(__package__).joinpath("fused_moe_configs")
    if not folder.is_dir() or not any(p.name.endswith(".json") for p in folder.iterdir()):
        return None
    return str(folder)


def register() -> dict[str, Any]:
    """The entry point. Returns what it did (also logged); calling it twice does the work once."""
    global _REGISTERED
    if _REGISTERED is not None:
        return _REGISTERED
    report: dict[str, Any] = {"enabled": False, "reason": "", "registered": [], "not_hooked": []}
    on, why = switch_on()
    mismatch = dsp.hardware_mismatch()
    if not on:
        report["reason"] = why
    elif mismatch:
        report["reason"] = f"hardware does not match the manifest: {mismatch}"
    else:
        report["enabled"] = True
        report["reason"] = why
        _register_ops(report)
    logger.info("latency_specialized backend: %s", report)
    _REGISTERED = report
    return report


def _register_ops(report: dict[str, Any]) -> None:
    slots = {e["slot"] for e in dsp.tuned_entries()}
    # read once: a bad KT_LS_PDL stops registration here, not at a layer's first forward, and no forward reads the env
    pdl = report["pdl"] = dsp.pdl_level()
    folder = _fused_moe_folder()
    if folder:
        current = os.environ.get("VLLM_TUNED_CONFIG_FOLDER")
        if current in (None, folder):
            os.environ["VLLM_TUNED_CONFIG_FOLDER"] = folder
            report["registered"].append(f"fused_moe tuned configs: VLLM_TUNED_CONFIG_FOLDER={folder}")
        else:
            report["not_hooked"].append(f"fused_moe configs: VLLM_TUNED_CONFIG_FOLDER already set to {current}")
    try:
        from vllm.model_executor.custom_op import CustomOp, PluggableLayer  # type: ignore[import-not-found]
    except ImportError as exc:
        report["vllm"] = f"vLLM is not installed ({exc}); op registration is a no-op, dispatch() still works"
        return
    if "dense_gemm" in slots:
        from vllm.model_executor.layers.linear import ColumnParallelLinear, ReplicatedLinear  # type: ignore[import-not-found]
        for name, base in (("ReplicatedLinear", ReplicatedLinear), ("ColumnParallelLinear", ColumnParallelLinear)):
            PluggableLayer.register_oot(name=name)(_linear_class(base, name, pdl))
            report["registered"].append(f"PluggableLayer {name} <- dense_gemm")
    if "add_rmsnorm" in slots:
        from vllm.model_executor.layers.layernorm import RMSNorm  # type: ignore[import-not-found]
        CustomOp.register_oot(name="RMSNorm")(_rmsnorm_class(RMSNorm, pdl))
        report["registered"].append("CustomOp RMSNorm <- add_rmsnorm")
    for slot in sorted(slots - {"dense_gemm", "add_rmsnorm"}):
        # No one-to-one vLLM layer with this calling convention: reachable through dispatch() only.
        report["not_hooked"].append(f"{slot}: no vLLM layer hook; use {__package__}.dispatch()")
