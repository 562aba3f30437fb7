"""A small HTTP client of the REST API: what the CLI (and any script) talks through."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import httpx

DEFAULT_API = "http://127.0.0.1:8765"
ADMIN_TOKEN_FILE = "admin-token"  # written by the embedded default on first start (service/auth.py)


def default_token() -> str | None:
    """$KT_TOKEN, else the embedded default's local admin token under $KT_DATA_DIR (~/.kerneltune)."""
    token = os.environ.get("KT_TOKEN")
    if token:
        return token.strip()
    path = Path(os.environ.get("KT_DATA_DIR") or Path.home() / ".kerneltune").expanduser() / ADMIN_TOKEN_FILE
    try:
        return path.read_text().strip() or None
    except OSError:  # no file, or not ours to read: the API answers 401 with what to do
        return None


class ApiError(RuntimeError):
    def __init__(self, status: int, detail: str):
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


class Client:
    def __init__(self, base_url: str | None = None, token: str | None = None, timeout: float = 30.0):
        self.base_url = (base_url or os.environ.get("KT_API_URL") or DEFAULT_API).rstrip("/")
        headers = {}
        token = token or default_token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout, headers=headers)

    def _call(self, method: str, path: str, **kw: Any) -> Any:
        try:
            resp = self._http.request(method, path, **kw)
        except httpx.TransportError as exc:
            raise ApiError(0, f"cannot reach the kerneltune API at {self.base_url}: {exc}") from exc
        if resp.status_code >= 400:
            try:
                body = resp.json()
                detail = body.get("detail") or body
            except ValueError:
                detail = resp.text
            raise ApiError(resp.status_code, detail if isinstance(detail, str) else str(detail))
        return resp.json() if resp.content else None

    def get(self, path: str, **params: Any) -> Any:
        return self._call("GET", path, params={k: v for k, v in params.items() if v is not None})

    def post(self, path: str, body: dict[str, Any] | None = None) -> Any:
        return self._call("POST", path, json=body or {})

    def download(self, path: str, dest: "os.PathLike[str] | str") -> None:
        try:
            with self._http.stream("GET", path) as resp:
                if resp.status_code >= 400:
                    resp.read()
                    raise ApiError(resp.status_code, resp.text)
                with open(dest, "wb") as f:
                    for chunk in resp.iter_bytes():
                        f.write(chunk)
        except httpx.TransportError as exc:
            raise ApiError(0, f"cannot reach the kerneltune API at {self.base_url}: {exc}") from exc

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                self.get("/v1/ready")
                return
            except ApiError as exc:
                last = exc
                time.sleep(0.3)
        raise ApiError(0, f"API not ready after {timeout_s:.0f} s: {last}")
