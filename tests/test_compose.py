"""docker-compose.yml cannot boot here (no Docker engine), so check what can be checked: it parses,
every service's command exists in the code with the options it passes, and the services the design
names are all there with health checks where others depend on them."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import typer
import yaml

from service.cli import app as cli_app

REPO = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
SERVICES = COMPOSE["services"]


def _cli_command(name: str):  # typer's own (vendored) click command type
    group = typer.main.get_command(cli_app)
    cmd = group.commands.get(name)
    assert cmd is not None, f"kerneltune has no '{name}' command"
    return cmd


def _check_kerneltune(argv: list[str]) -> None:
    cmd = _cli_command(argv[1])
    known = {opt for p in cmd.params for opt in getattr(p, "opts", [])}
    for arg in argv[2:]:
        if arg.startswith("--"):
            assert arg.split("=")[0] in known, f"kerneltune {argv[1]} has no option {arg}"


def _check_celery(argv: list[str]) -> None:
    target = argv[argv.index("-A") + 1]
    module, _, attr = target.partition(":")
    app = getattr(importlib.import_module(module), attr or "app")
    assert app.main == "kerneltune"
    if "-Q" in argv:
        queue = argv[argv.index("-Q") + 1]
        assert queue.startswith("kt."), queue


def test_design_services_present() -> None:
    assert {"api", "postgres", "redis", "flower", "worker-gpu0", "worker-control"} <= set(SERVICES)
    gpu = SERVICES["worker-gpu0"]
    assert gpu["environment"]["CUDA_VISIBLE_DEVICES"] == "0"
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"] and devices[0]["device_ids"] == ["0"]


@pytest.mark.parametrize("name", sorted(n for n, s in SERVICES.items() if "command" in s))
def test_service_command_exists(name: str) -> None:
    argv = SERVICES[name]["command"]
    if argv[0] == "kerneltune":
        _check_kerneltune(argv)
    elif argv[0] == "celery":
        _check_celery(argv)
    elif argv[0] != "redis-server":
        pytest.fail(f"service {name}: unknown command {argv[0]!r}")
    if "build" in SERVICES[name]:
        assert (REPO / "Dockerfile").is_file()


def test_dependencies_are_health_checked() -> None:
    for name, svc in SERVICES.items():
        for dep, cond in (svc.get("depends_on") or {}).items():
            assert dep in SERVICES, f"{name} depends on unknown {dep}"
            if cond.get("condition") == "service_healthy":
                assert "healthcheck" in SERVICES[dep], f"{name} waits for {dep} to be healthy, which has no check"


def test_production_urls_point_at_the_compose_servers() -> None:
    env = SERVICES["api"]["environment"]
    assert env["KT_DATABASE_URL"].startswith("postgresql+psycopg://") and "@postgres:" in env["KT_DATABASE_URL"]
    assert env["KT_BROKER_URL"] == "redis://redis:6379/0"
    assert env["KT_AUTO_BUCKET_CHECKS"] == "1"  # production checks every new winner's whole bucket
