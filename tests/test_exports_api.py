"""POST /v1/exports through the API: a refusal is a 409 with each reason, a wheel is downloadable.
(tests/test_export.py covers the wheel itself, installed in a fresh venv.)"""

from __future__ import annotations

from fastapi.testclient import TestClient


def test_export_refused_with_reasons_when_nothing_won(client: TestClient, make_token) -> None:
    token = make_token(["export", "read"])
    r = client.post("/v1/exports", json={"hardware": "h200", "model": "kimi-k2-like"},
                    headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 409, r.text
    assert "h200" in r.json()["detail"]


def test_export_needs_the_export_scope(client: TestClient, make_token) -> None:
    token = make_token(["read", "submit"])
    r = client.post("/v1/exports", json={"hardware": "cpu", "model": "tiny-moe"},
                    headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 403, r.text


def test_unknown_export_wheel_is_404(client: TestClient, make_token) -> None:
    token = make_token(["read"])
    r = client.get("/v1/exports/999/wheel", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 404, r.text


def test_bad_hardware_name_is_422(client: TestClient, make_token) -> None:
    token = make_token(["export"])
    r = client.post("/v1/exports", json={"hardware": "../etc", "model": "m"},
                    headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 422, r.text
