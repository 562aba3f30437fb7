"""Schemathesis against the live API's own OpenAPI document: a real uvicorn server on a fresh
PostgreSQL database (filesystem broker under the test's data dir), every operation fuzzed with
schema-valid and schema-violating inputs (bounded: KT_FUZZ_EXAMPLES per operation).

Properties: no 5xx ever; every 4xx is JSON with a human `detail` string and an `error` code.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis import GenerationMode

from service.embedded import EmbeddedStack
from tests.support.live import GEMM_SOURCE, api_token, auth_headers
from tests.support.servers import free_port, fresh_pg_database

pytestmark = pytest.mark.services

EXAMPLES = int(os.environ.get("KT_FUZZ_EXAMPLES", "25"))
COUNTS: dict[str, int] = {"cases": 0, "2xx": 0, "4xx": 0, "5xx": 0}


@pytest.fixture(scope="module")
def live_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    url, drop = fresh_pg_database()
    data_dir = tmp_path_factory.mktemp("fuzz")
    stack = EmbeddedStack(data_dir=data_dir, port=free_port(), workers=0, env_extra={"KT_DATABASE_URL": url})
    try:
        stack.start(ready_timeout_s=120)
        headers = auth_headers(api_token(data_dir, url))
        # Something for the fuzzer's ids to hit: a variant (id 1) and a job on a queue nobody reads.
        import httpx

        with httpx.Client(base_url=stack.url, headers=headers, timeout=30) as http:
            v = http.post("/v1/variants", json={"slot": "dense_gemm", "language": "torch", "source": GEMM_SOURCE,
                                                "config_space": {"n_chunks": [1, 2]}, "provenance": {"author": "fuzz"}})
            assert v.status_code == 201, v.text
            j = http.post("/v1/jobs", json={"variant_id": v.json()["id"], "hardware": "h200", "configs": "all",
                                            "deployment": {"spec": "tiny-moe", "tp": 1, "batch_sizes": [1]}})
            assert j.status_code == 201, j.text
        yield stack.url, headers
    finally:
        stack.stop()
        drop()
        print(f"\nfuzz cases={COUNTS['cases']} 2xx={COUNTS['2xx']} 4xx={COUNTS['4xx']} 5xx={COUNTS['5xx']} "
              f"examples_per_operation<={EXAMPLES}")


def _check(case: Any, url: str, headers: dict[str, str]) -> None:
    response = case.call(base_url=url, headers={**(case.headers or {}), **headers}, timeout=60)
    COUNTS["cases"] += 1
    status = response.status_code
    COUNTS[f"{status // 100}xx"] = COUNTS.get(f"{status // 100}xx", 0) + 1
    where = f"{case.method} {case.formatted_path} -> {status}: {response.text[:500]}"
    assert status < 500, where
    if 400 <= status < 500:
        ctype = response.headers.get("content-type") or [""]  # schemathesis keeps every value of a header
        ctype = ctype[0] if isinstance(ctype, list) else ctype
        assert ctype.startswith("application/json"), where
        body = response.json()
        assert isinstance(body, dict) and isinstance(body.get("detail"), str) and body["detail"].strip(), where
        assert isinstance(body.get("error"), str) and body["error"], where
        assert "Traceback" not in response.text, where


def test_no_5xx_and_useful_4xx(live_api: tuple[str, dict[str, str]]) -> None:
    """Every operation, with valid (positive) and invalid (negative) inputs; all failures are
    gathered (each one shrunk by Hypothesis) and reported together."""
    url, headers = live_api
    schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
    failures: list[str] = []
    operations = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        operations += 1
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            # No shrinking: a failing case is reported as generated, and the run stays bounded.
            @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                      phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
            @given(case=operation.as_strategy(generation_mode=mode))
            def fuzz(case: Any) -> None:
                _check(case, url, headers)

            try:
                fuzz()
            except Exception as exc:  # one operation's failure must not hide the others'
                failures.append(f"{operation.method.upper()} {operation.path} [{mode.value}]: {exc}")
    print(f"\noperations={operations} failures={len(failures)}")
    assert operations >= 10
    assert not failures, "\n".join(failures)
