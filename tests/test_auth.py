"""API tokens: scopes on every route, hashing, quotas (429), private jobs, the embedded admin token file."""

from __future__ import annotations

import hashlib
import os
import re
import stat
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from db.models import ApiToken, utcnow
from db.queries.runs import claim_run, record_result
from service.auth import ensure_local_admin_token
from service.client import default_token
from service.embedded import EmbeddedStack

SOURCE = "def build(config, shape):\n    raise NotImplementedError\n"
DEPLOY = {"spec": "tiny-moe", "tp": 1, "batch_sizes": [1]}
MakeToken = Callable[..., str]
ALL = {"read", "submit", "export", "admin"}


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


def expected_scope(method: str, path: str) -> str | None:
    """The contract, written out independently of service/auth.py's policy."""
    if (method, path) in {("GET", "/v1/health"), ("GET", "/v1/ready"), ("GET", "/metrics")}:
        return None
    if path == "/v1/tokens/me":
        return ""
    if path.startswith("/v1/tokens"):
        return "admin"
    if method == "GET":
        return "read"
    return "export" if path.startswith("/v1/exports") else "submit"


def test_every_route_needs_its_scope(client: TestClient, make_token: MakeToken) -> None:
    admin = client.headers.pop("Authorization")
    routes = [(m.upper(), p) for p, ops in client.get("/openapi.json").json()["paths"].items() for m in ops]
    assert {("POST", "/v1/jobs"), ("POST", "/v1/jobs/{job_id}/cancel"), ("POST", "/v1/variants"),
            ("GET", "/v1/leaderboard"), ("POST", "/v1/tokens"), ("GET", "/v1/tokens/me"),
            ("GET", "/metrics")} <= set(routes)
    checked = 0
    for method, path in routes:
        url = re.sub(r"\{[^}]+\}", "1", path)
        scope = expected_scope(method, path)
        if scope is None:  # public: answers without a token
            assert client.request(method, url).status_code in (200, 503), (method, path)
            continue
        r = client.request(method, url)
        assert r.status_code == 401 and r.json()["error"] == "unauthorized", (method, path, r.text)
        assert r.headers["www-authenticate"].startswith("Bearer")
        assert client.request(method, url, headers=bearer("kt_not-a-token")).status_code == 401, (method, path)
        if scope:
            wrong = make_token(sorted(ALL - {scope, "admin"}))
            r = client.request(method, url, headers=bearer(wrong))
            assert r.status_code == 403 and scope in r.json()["detail"], (method, path, r.text)
            right = make_token([scope])
        else:
            right = make_token(["submit"])
        r = client.request(method, url, headers=bearer(right), json={} if method == "POST" else None)
        assert r.status_code not in (401, 403), (method, path, r.text)  # past auth: 200/404/422 from the handler
        checked += 1
    assert checked >= 12
    assert client.get("/v1/jobs", headers={"Authorization": admin}).status_code == 200


def test_tokens_are_stored_hashed_and_shown_once(client: TestClient, db_url: str) -> None:
    r = client.post("/v1/tokens", json={"name": "alice", "scopes": ["read", "submit"], "gpu_seconds_per_day": 3600,
                                        "max_concurrent_jobs": 4})
    assert r.status_code == 201, r.text
    secret = r.json()["secret"]
    assert secret.startswith("kt_") and len(secret) >= 40
    with client.app.state.session_factory() as s:  # type: ignore[attr-defined]
        row = s.scalars(select(ApiToken).where(ApiToken.name == "alice")).one()
        assert row.secret_hash == hashlib.sha256(secret.encode()).hexdigest()
        assert all(secret not in str(v) for v in vars(row).values())
    if db_url.startswith("sqlite"):  # not anywhere in the database file (nor its write-ahead log)
        path = Path(db_url.removeprefix("sqlite:///"))
        for f in (path, Path(f"{path}-wal")):
            if f.exists():
                assert secret.encode() not in f.read_bytes()
    listed = client.get("/v1/tokens").json()
    assert "secret" not in str(listed).lower().replace("secret_hash", "") and secret not in str(listed)
    me = client.get("/v1/tokens/me", headers=bearer(secret)).json()
    assert me["token"]["name"] == "alice" and me["token"]["max_concurrent_jobs"] == 4
    assert client.post("/v1/tokens", json={"name": "alice", "scopes": ["read"]}).status_code == 409
    assert client.post("/v1/tokens", json={"name": "x", "scopes": ["root"]}).status_code == 422
    assert client.post("/v1/tokens/alice/revoke").json()["revoked"] is True
    assert client.get("/v1/jobs", headers=bearer(secret)).status_code == 401


def _variant(client: TestClient, headers: dict[str, str]) -> int:
    r = client.post("/v1/variants", headers=headers, json={
        "slot": "dense_gemm", "language": "torch", "source": SOURCE, "config_space": {"BLOCK": [64]},
        "provenance": {"author": "alice"}})
    assert r.status_code in (200, 201), r.text
    return int(r.json()["id"])


def _job(client: TestClient, headers: dict[str, str], variant_id: int, **over: Any) -> Any:
    return client.post("/v1/jobs", headers=headers, json={"variant_id": variant_id, "deployment": DEPLOY,
                                                          "shapes": ["o_proj"], **over})


def test_concurrent_jobs_quota(client: TestClient, make_token: MakeToken) -> None:
    alice = bearer(make_token(["read", "submit"], name="alice", max_concurrent_jobs=1))
    vid = _variant(client, alice)
    first = _job(client, alice, vid)
    assert first.status_code == 201 and first.json()["job"]["submitted_by"] == "alice"
    r = _job(client, alice, vid)
    assert r.status_code == 429 and r.json()["error"] == "quota_exceeded"
    assert "1 queued or running jobs; its limit is 1" in r.json()["detail"] and r.headers["retry-after"]
    assert _job(client, bearer(make_token(["submit"])), vid).status_code == 201  # quotas are per token
    client.post(f"/v1/jobs/{first.json()['job']['id']}/cancel", headers=alice)
    assert _job(client, alice, vid).status_code == 201


def test_daily_gpu_seconds_quota(client: TestClient, make_token: MakeToken,
                                 run_result: Callable[..., dict[str, Any]]) -> None:
    alice = bearer(make_token(["read", "submit"], name="alice", gpu_seconds_per_day=5))
    vid = _variant(client, alice)
    job = _job(client, alice, vid, deployment={**DEPLOY, "batch_sizes": [1, 2, 4]}).json()["job"]
    runs = [x["id"] for x in client.get(f"/v1/jobs/{job['id']}/runs", headers=alice).json()]
    with client.app.state.session_factory() as s:  # type: ignore[attr-defined]
        record_result(s, runs[0], run_result(runs[0], wall_s=100.0), now=utcnow() - timedelta(days=1))  # yesterday
        record_result(s, runs[1], run_result(runs[1], wall_s=3.0))
    assert _job(client, alice, vid, configs=[{"BLOCK": 64}]).status_code == 201  # 3 of 5 s today
    with client.app.state.session_factory() as s:  # type: ignore[attr-defined]
        record_result(s, runs[2], run_result(runs[2], wall_s=2.5))
    r = _job(client, alice, vid)
    assert r.status_code == 429 and "used 6 of its 5 GPU-seconds today" in r.json()["detail"], r.text
    assert 0 < int(r.headers["retry-after"]) <= 86400
    assert client.get("/v1/tokens/me", headers=alice).json()["gpu_seconds_today"] == 5.5


def test_private_jobs(client: TestClient, make_token: MakeToken) -> None:
    alice = bearer(make_token(["read", "submit"], name="alice"))
    bob = bearer(make_token(["read", "submit"], name="bob"))
    vid = _variant(client, alice)
    private = _job(client, alice, vid, private=True).json()["job"]
    public = _job(client, alice, vid).json()["job"]
    assert private["private"] is True and private["submitted_by"] == "alice"
    run_id = client.get(f"/v1/jobs/{private['id']}/runs", headers=alice).json()[0]["id"]
    assert [j["id"] for j in client.get("/v1/jobs", headers=bob).json()] == [public["id"]]
    for url in (f"/v1/jobs/{private['id']}", f"/v1/jobs/{private['id']}/runs", f"/v1/runs/{run_id}"):
        assert client.get(url, headers=bob).status_code == 404, url
        assert client.get(url, headers=alice).status_code == 200, url
        assert client.get(url).status_code == 200, url  # the admin sees everything
    assert client.post(f"/v1/jobs/{private['id']}/cancel", headers=bob).status_code == 404
    r = client.post(f"/v1/jobs/{public['id']}/cancel", headers=bob)
    assert r.status_code == 403 and "another token" in r.json()["detail"]
    assert client.post(f"/v1/jobs/{private['id']}/cancel", headers=alice).json()["job"]["state"] == "cancelled"
    assert {j["id"] for j in client.get("/v1/jobs").json()} == {private["id"], public["id"]}


def test_first_start_writes_the_admin_token_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("KT_DATABASE_URL", "KT_TOKEN", "KT_DATA_DIR"):
        monkeypatch.delenv(var, raising=False)
    stack = EmbeddedStack(tmp_path / "kt")
    path = stack.ensure_admin_token()  # what start() does before it starts the API
    assert path == tmp_path / "kt" / "admin-token" and stack.admin_token_created
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    secret = stack.admin_token
    from db.queries.tokens import get_by_secret
    from db.session import make_engine, make_session_factory
    engine = make_engine(stack.env["KT_DATABASE_URL"])
    factory = make_session_factory(engine)
    with factory() as s:
        token = get_by_secret(s, secret)
        assert token is not None and token.scopes == ["admin"] and token.name == "local-admin"
    assert ensure_local_admin_token(factory, tmp_path / "kt") == (path, False)  # second start: kept
    assert path.read_text().strip() == secret
    monkeypatch.setenv("KT_DATA_DIR", str(tmp_path / "kt"))
    assert default_token() == secret  # the CLI and client read it by default
    monkeypatch.setenv("KT_TOKEN", "kt_from_env")
    assert default_token() == "kt_from_env"
    path.unlink()  # lost file: a new secret, and the old one stops working
    _, created = ensure_local_admin_token(factory, tmp_path / "kt")
    assert created and path.read_text().strip() != secret
    with factory() as s:
        assert get_by_secret(s, secret) is None
    engine.dispose()


def test_token_cache_window(db_url: str, tmp_path: Path) -> None:
    """Verified tokens are cached per secret hash for auth_cache_seconds: a revoke through this API
    process applies at once (test_tokens_are_stored_hashed_and_shown_once); one made elsewhere (another
    API process, straight in the database) applies within the window; 0 turns the cache off."""
    import time

    from sqlalchemy import update

    from service.app import create_app
    from service.settings import Settings
    from tests.conftest import token_in_db

    for ttl in (0.5, 0.0):
        settings = Settings(database_url=db_url, broker_url="memory://", data_dir=tmp_path, auth_cache_seconds=ttl)
        app = create_app(settings, enqueue_runs=lambda ids, queue: None, broker_ping=lambda: None)
        with TestClient(app) as c:
            secret = token_in_db(app.state.session_factory, f"elsewhere{int(ttl * 10)}", ["read"])
            assert c.get("/v1/jobs", headers=bearer(secret)).status_code == 200
            with app.state.session_factory() as s:  # revoked by someone else: this process is not told
                s.execute(update(ApiToken).where(ApiToken.secret_hash == hashlib.sha256(secret.encode()).hexdigest())
                          .values(revoked_at=utcnow()))
                s.commit()
            if ttl:
                assert c.get("/v1/jobs", headers=bearer(secret)).status_code == 200  # inside the window
                time.sleep(ttl + 0.1)
            assert c.get("/v1/jobs", headers=bearer(secret)).status_code == 401
        app.state.engine.dispose()
