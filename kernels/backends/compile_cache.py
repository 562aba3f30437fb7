"""Persistent compile cache shared by the triton and cute backends.

Layout under the cache root (env ``KT_COMPILE_CACHE``, default ``~/.kerneltune/compile-cache``)::

    records/<key[:2]>/<key>.json   what was built: language, versions, arch, config, shape, seconds
    records/<key[:2]>/<key>.ptx    the PTX (evidence, and the claims check on a hit)
    triton/                        TRITON_CACHE_DIR: Triton's own cubin cache, so a warm worker or a
                                   restarted one loads binaries instead of compiling again
    cute/                          CUTE_DSL_CACHE_DIR: CuTe DSL 4.3.5's file cache of compiled
                                   MLIR modules (cubin inside), keyed by its own IR hash

The key is sha256 over (source hash, canonical config JSON, shape JSON, language + version, arch):
anything that can change the binary changes the key. A record says "this exact build succeeded
before and produced this PTX"; the language's own cache holds the binary that is loaded.

Both language caches read their directory from the environment at import time (CuTe DSL binds it
as a default argument when ``cutlass`` is imported), so ``configure_language_caches()`` must run
before ``import triton`` / ``import cutlass`` in the sandbox child.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENV = "KT_COMPILE_CACHE"


def cache_root() -> Path:
    return Path(os.environ.get(ENV) or Path.home() / ".kerneltune" / "compile-cache")


def configure_language_caches(root: Path | None = None) -> Path:
    """Point Triton's and CuTe DSL's on-disk caches inside the cache root (unless already set)."""
    root = root or cache_root()
    for env, sub in (("TRITON_CACHE_DIR", "triton"), ("CUTE_DSL_CACHE_DIR", "cute")):
        path = Path(os.environ.setdefault(env, str(root / sub)))
        path.mkdir(parents=True, exist_ok=True)  # CuTe DSL skips a missing dir silently
    return root


def canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def make_key(source_hash: str, config: dict[str, Any], shape: dict[str, Any], language: str,
             language_version: str, arch: str) -> str:
    payload = canonical({"source": source_hash, "config": config, "shape": shape, "language": language,
                         "version": language_version, "arch": arch})
    return hashlib.sha256(payload.encode()).hexdigest()


@dataclass
class CacheRecord:
    key: str
    meta: dict[str, Any]
    ptx: str | None


def _paths(key: str, root: Path) -> tuple[Path, Path]:
    d = root / "records" / key[:2]
    return d / f"{key}.json", d / f"{key}.ptx"


def lookup(key: str, root: Path | None = None) -> CacheRecord | None:
    meta_path, ptx_path = _paths(key, root or cache_root())
    try:
        meta = json.loads(meta_path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None  # a torn or missing record is a miss, never an error
    ptx = ptx_path.read_text() if ptx_path.exists() else None
    return CacheRecord(key, meta, ptx)


def _atomic_write(path: Path, text: str) -> None:
    # Several workers share one cache: write aside, then rename (atomic on POSIX).
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def store(key: str, meta: dict[str, Any], ptx: str | None = None, root: Path | None = None) -> CacheRecord:
    meta_path, ptx_path = _paths(key, root or cache_root())
    meta = {**meta, "key": key, "stored_at": time.time()}
    if ptx is not None:
        _atomic_write(ptx_path, ptx)
    _atomic_write(meta_path, canonical(meta))  # the record last: its presence means complete
    return CacheRecord(key, meta, ptx)
