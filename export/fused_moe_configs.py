"""vLLM's tuned fused_moe config JSON: which variants map onto it, the files, and a validator.

vLLM reads ``E=<E>,N=<N>,device_name=<GPU>[,dtype=..][,block_shape=[n,k]][_down].json`` from
``VLLM_TUNED_CONFIG_FOLDER`` (before its bundled folder): N is the per-rank intermediate size
(moe_intermediate / TP), keys are batch sizes as strings ("1", "2", ...; the nearest one to M is
used), values the Triton meta-parameters of its fused_moe kernel. A top-level "triton_version" string
is allowed (vLLM's own files carry one). Unquantized bf16/fp16 experts have no dtype part.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

REQUIRED_KEYS = ("BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "GROUP_SIZE_M", "num_warps", "num_stages")
# Optional per-batch keys seen in vLLM's bundled configs (ROCm, split-K, TMA, XPU variants).
OPTIONAL_KEYS = ("SPLIT_K", "waves_per_eu", "matrix_instr_nonkdim", "kpack", "USE_TMA", "num_ctas", "grf_mode")
DECLARATION = "VLLM_FUSED_MOE_CONFIG_KEYS"
MOE_SLOT = "moe_experts"
_NAME = re.compile(r"^E=(?P<E>[1-9]\d*),N=(?P<N>[1-9]\d*),device_name=(?P<device>[A-Za-z0-9_.\-]+)"
                   r"(?:,dtype=(?P<dtype>[a-z0-9_]+))?(?:,block_shape=\[(?P<bn>\d+),(?P<bk>\d+)\])?(?P<down>_down)?\.json$")
_POW2 = {"BLOCK_SIZE_M", "BLOCK_SIZE_N", "BLOCK_SIZE_K", "num_warps"}
# bf16/fp16 experts are vLLM's unquantized path: its file names carry no dtype for them.
_UNQUANTIZED = ("bfloat16", "float16")


def declared_mapping(source: str, config_keys: set[str]) -> dict[str, str] | None:
    """{vLLM key: config param} when the variant maps onto vLLM's Triton fused_moe kernel, else None.

    A module-level ``VLLM_FUSED_MOE_CONFIG_KEYS`` (a dict vLLM key -> param name, or a list of params
    named as vLLM names them) declares it; a config space holding all six vLLM names does too. The
    source is parsed, never executed: the exporter does not run submitted code.
    """
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == DECLARATION for t in targets) and node.value is not None:
            value = ast.literal_eval(node.value)
            mapping = dict(value) if isinstance(value, dict) else {k: k for k in value}
            missing = [k for k in REQUIRED_KEYS if k not in mapping]
            if missing:
                raise ValueError(f"{DECLARATION} lacks {', '.join(missing)}")
            return {str(k): str(v) for k, v in mapping.items()}
    if set(REQUIRED_KEYS) <= config_keys:
        return {k: k for k in REQUIRED_KEYS}
    return None


def device_file_name(device_name: str) -> str:
    """vLLM's get_device_name_as_file_name, with its H200-family rule."""
    name = device_name.replace(" ", "_")
    return "NVIDIA_H200" if "H200" in name.split("_") else name


def config_file_name(e: int, n: int, device_name: str, dtype: str | None = None,
                     block_shape: tuple[int, int] | None = None) -> str:
    dtype_part = "" if dtype is None or dtype in _UNQUANTIZED else f",dtype={dtype}"
    block = f",block_shape=[{block_shape[0]},{block_shape[1]}]" if block_shape else ""
    return f"E={e},N={n},device_name={device_file_name(device_name)}{dtype_part}{block}.json"


def vllm_params(config: dict[str, Any], mapping: dict[str, str]) -> dict[str, int]:
    """The vLLM meta-parameters of one config (ints; a missing param is an error, not a default)."""
    out = {}
    for vkey, param in mapping.items():
        if param not in config:
            raise ValueError(f"config {config} has no {param!r} for vLLM's {vkey}")
        out[vkey] = int(config[param])
    return out


def render(e: int, n: int, device_name: str, dtype: str | None, per_m: dict[int, dict[str, int]],
           triton_version: str | None) -> tuple[str, dict[str, Any]]:
    """(file name, JSON document) for one (E, N, device): batch-size keys in ascending order."""
    doc: dict[str, Any] = {str(m): dict(sorted(per_m[m].items())) for m in sorted(per_m)}
    if triton_version:
        doc["triton_version"] = triton_version
    name = config_file_name(e, n, device_name, dtype)
    errors = validate_config_file(name, doc)
    if errors:
        raise ValueError(f"generated fused_moe config {name} is invalid: {'; '.join(errors)}")
    return name, doc


def validate_config_file(name: str, data: Any) -> list[str]:
    """Every way ``name``/``data`` is not a tuned config vLLM can load (empty list: valid)."""
    errors = []
    if not _NAME.match(name):
        errors.append(f"file name {name!r} is not E=<E>,N=<N>,device_name=<GPU>[,dtype=..][,block_shape=[n,k]].json")
    if not isinstance(data, dict) or not data:
        return errors + ["content must be a non-empty JSON object"]
    batch_keys = [k for k in data if k != "triton_version"]
    if "triton_version" in data and not isinstance(data["triton_version"], str):
        errors.append("triton_version must be a string")
    if not batch_keys:
        errors.append("no batch-size keys")
    for key in batch_keys:
        if not (isinstance(key, str) and key.isdigit() and int(key) >= 1 and str(int(key)) == key):
            errors.append(f"key {key!r} is not a batch size (a positive integer as a string)")
            continue
        value = data[key]
        if not isinstance(value, dict):
            errors.append(f"[{key}] must be an object of Triton meta-parameters")
            continue
        for req in REQUIRED_KEYS:
            if req not in value:
                errors.append(f"[{key}] lacks {req}")
        for k, v in value.items():
            if k not in REQUIRED_KEYS and k not in OPTIONAL_KEYS and not k.startswith("tile_"):
                errors.append(f"[{key}] has unknown parameter {k!r}")
            elif not isinstance(v, int) or isinstance(v, bool) or v < (0 if k in OPTIONAL_KEYS else 1):
                errors.append(f"[{key}].{k} = {v!r} is not a valid integer")
            elif k in _POW2 and v & (v - 1):
                errors.append(f"[{key}].{k} = {v} is not a power of two")
        if isinstance(value.get("BLOCK_SIZE_M"), int) and value["BLOCK_SIZE_M"] < 16:
            errors.append(f"[{key}].BLOCK_SIZE_M = {value['BLOCK_SIZE_M']} < 16 (tl.dot's minimum)")
    return errors


def validate_config_dir(folder: Path) -> dict[str, list[str]]:
    """File name -> errors for every JSON file under ``folder`` (what VLLM_TUNED_CONFIG_FOLDER would read)."""
    out = {}
    for path in sorted(Path(folder).glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except ValueError as exc:
            out[path.name] = [f"not JSON: {exc}"]
            continue
        out[path.name] = validate_config_file(path.name, data)
    return out
