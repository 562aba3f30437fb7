"""Device fingerprint (stored with every number), hardware key/class (queue names), and the memory
bandwidth that sets each slot's floor, measured once per fingerprint and cached under the data dir.

Runs in the child before the variant is imported. The child only *reads* the cache (passed in by
the worker); the worker writes measurements back, so a variant cannot poison the cache file.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import time
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

CACHE_FILE = "bandwidth.json"
_HARDWARE_CLASSES = ("gb300", "gb200", "b300", "b200", "h200", "h100", "h20", "a100", "l40s")


def data_dir_from_env() -> Path:
    return Path(os.environ.get("KT_DATA_DIR", str(Path.home() / ".kerneltune")))


def llc_bytes(device: torch.device) -> int:
    """Last-level cache: GPU L2, or the highest-level CPU cache in sysfs (falls back to 32 MiB)."""
    import torch  # lazily: the worker process itself never needs it

    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).L2_cache_size)
    best_level, best = -1, 0
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level = int((index / "level").read_text())
            size = _parse_size((index / "size").read_text().strip())
        except (OSError, ValueError):
            continue
        if level > best_level or (level == best_level and size > best):
            best_level, best = level, size
    return best or 32 << 20


def _parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+)\s*([KMG]?)", text)
    if not m:
        raise ValueError(text)
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _nvidia_smi(index: int) -> dict[str, Any]:
    """Clocks and driver from nvidia-smi when present (optional: torch alone gives the rest)."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return {}
    fields = "driver_version,clocks.max.sm,clocks.max.mem,power.limit"
    try:
        out = subprocess.run([smi, f"--query-gpu={fields}", "--format=csv,noheader,nounits", f"--id={index}"],
                             capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {}
    vals = [v.strip() for v in out.split(",")]
    return dict(zip(("driver", "sm_clock_max_mhz", "mem_clock_max_mhz", "power_limit_w"), vals))


def hardware_class(device_name: str) -> str:
    low = device_name.lower().replace("nvidia", "").replace(" ", "")
    for cls in _HARDWARE_CLASSES:
        if cls in low:
            return cls
    return re.sub(r"[^a-z0-9]+", "", low)[:16] or "gpu"


def fingerprint(device: torch.device, threads: int) -> dict[str, Any]:
    import torch  # lazily: the worker process itself never needs it

    libs = {"torch": torch.__version__, "triton": _version("triton"), "cutlass_dsl": _version("nvidia-cutlass-dsl"),
            "numpy": _version("numpy")}
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        p = torch.cuda.get_device_properties(index)
        hw = {"name": p.name, "arch": f"sm_{p.major}{p.minor}", "sm_count": p.multi_processor_count,
              "memory_gib": round(p.total_memory / 2**30), "l2_bytes": int(p.L2_cache_size)}
        cls = hardware_class(p.name)
        extra = {"cuda": torch.version.cuda, **_nvidia_smi(index)}
    else:
        hw = {"name": _cpu_model(), "arch": platform.machine(), "cores": os.cpu_count(), "l3_bytes": llc_bytes(device)}
        cls = "cpu"
        extra = {"threads": threads}
    key = f"{cls}-{hashlib.sha256(json.dumps(hw, sort_keys=True).encode()).hexdigest()[:8]}"
    return {"hardware_key": key, "hardware_class": cls, **hw, **extra, "libraries": libs}


def bandwidth_key(fp: dict[str, Any]) -> str:
    # The CPU figure depends on the thread count the bench uses.
    return f"{fp['hardware_key']}/t{fp['threads']}" if "threads" in fp else fp["hardware_key"]


def measure_bandwidth_gbs(device: torch.device) -> float:
    """Copy bandwidth counting bytes read + written (the floor's ceiling), best of a few copies.
    1 GiB on a GPU (as baselines/h200_torch_small_m.py), 256 MiB (well above the LLC) on a CPU."""
    import torch  # lazily: the worker process itself never needs it

    nbytes = 1 << 30 if device.type == "cuda" else 256 << 20
    src = torch.ones(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    dst.copy_(src)
    best = float("inf")
    for _ in range(5):
        if device.type == "cuda":
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            dst.copy_(src)
            b.record()
            b.synchronize()
            seconds = a.elapsed_time(b) / 1e3
        else:
            t0 = time.perf_counter()
            dst.copy_(src)
            seconds = time.perf_counter() - t0
        best = min(best, seconds)
    copy_gbs = 2 * nbytes / best / 1e9
    if device.type == "cuda":
        return copy_gbs
    # A CPU streams reads faster than it copies: take the better of the two so the floor is a floor. The read is
    # summed as int64 words: a uint8 sum widens every byte (~1 GB/s, 5 s of CPU per measurement) and is no read speed.
    words = src.view(torch.int64)
    read_best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        words.sum()
        read_best = min(read_best, time.perf_counter() - t0)
    return max(copy_gbs, nbytes / read_best / 1e9)


def read_bandwidth_cache(data_dir: Path) -> dict[str, Any]:
    path = data_dir / CACHE_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def store_bandwidth(data_dir: Path, key: str, gbs: float, fp: dict[str, Any]) -> None:
    """Merge one measurement into the cache file (locked: several workers share a data dir)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir / (CACHE_FILE + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = read_bandwidth_cache(data_dir)
        data[key] = {"bandwidth_gbs": gbs, "measured_at": time.time(), "device": fp.get("name")}
        tmp = data_dir / f".{CACHE_FILE}.{os.getpid()}"
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        os.replace(tmp, data_dir / CACHE_FILE)
