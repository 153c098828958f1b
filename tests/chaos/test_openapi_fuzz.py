"""Point 6, REST part two: every operation of the OpenAPI document that ``serve`` publishes,
fuzzed with schemathesis (bodies, path and query parameters generated from the schema), with a
valid token: no 5xx, and afterwards no partial write. A 500 whose request carried a NUL
character is the known bug pinned by ``test_hostile_input.py``; it is counted, not hidden."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from uuid import uuid4

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings

from realtime_dispatch.messenger import commands
from tests.chaos.harness import report, scale
from tests.chaos.test_hostile_input import invariants, serving
from tests.hub_fixtures import make_token

schemathesis = pytest.importorskip("schemathesis")

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]

EXAMPLES = scale("REALTIME_CHAOS_SCHEMA_EXAMPLES", 8)


def carries_nul(case: Any) -> bool:
    parts = [case.body, case.path_parameters, case.query]
    return any("\\u0000" in repr(p) or "\x00" in repr(p) for p in parts if p is not None)


async def test_openapi_operations_fuzzed_no_5xx(
    pool: asyncpg.Pool, database_url: str, tmp_path: Path
) -> None:
    alice, bob = uuid4(), uuid4()
    async with pool.acquire() as conn:
        chat = await commands.create_chat(conn, creator=alice, title="schema", members=[bob])
        await commands.send_message(conn, chat_id=chat, sender=alice, body="seed")
    async with serving(database_url, tmp_path) as serve:
        headers = {"Authorization": f"Bearer {make_token(alice, ttl=3600)}"}
        schema = schemathesis.openapi.from_url(f"{serve.http_url}/openapi.json")
        calls = {"requests": 0, "operations": 0, "nul_500": 0}
        statuses: dict[str, int] = {}
        server_errors: list[str] = []

        def fuzz_all() -> None:
            for result in schema.get_all_operations():
                operation = result.ok()
                calls["operations"] += 1

                @settings(
                    max_examples=EXAMPLES,
                    deadline=None,
                    database=None,
                    suppress_health_check=list(HealthCheck),
                )
                @given(case=operation.as_strategy())
                def fuzz(case: Any) -> None:
                    response = case.call(base_url=serve.http_url, headers=headers, timeout=30)
                    calls["requests"] += 1
                    code = str(response.status_code)
                    statuses[code] = statuses.get(code, 0) + 1
                    if response.status_code >= 500:
                        if carries_nul(case):
                            calls["nul_500"] += 1
                        else:
                            server_errors.append(
                                f"{case.method} {case.formatted_path} {case.body!r}"
                                f" -> {response.status_code}"
                            )

                fuzz()

        await asyncio.to_thread(fuzz_all)
        assert not server_errors, server_errors
        await invariants(pool)
    report(
        "REST fuzz from the OpenAPI schema (schemathesis)",
        operations=calls["operations"],
        requests=calls["requests"],
        examples_per_operation=EXAMPLES,
        statuses=dict(sorted(statuses.items())),
        server_errors_other_than_nul=0,
        server_errors_nul_known_bug=calls["nul_500"],
        partial_writes=0,
    )
