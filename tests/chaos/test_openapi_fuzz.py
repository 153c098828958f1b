"""Point 6, REST part two: every operation of the OpenAPI document that ``serve`` publishes,
fuzzed with schemathesis (bodies, path and query parameters generated from the schema), with a
valid token: no 5xx, and afterwards no partial write. A 500 whose request carried a NUL
character is the known bug pinned by ``test_hostile_input.py``; it is counted, not hidden."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any
from uuid import uuid4

import asyncpg
import pytest
from hypothesis import HealthCheck, given, settings

from realtime_dispatch.messenger import commands
from support.hub_wire import make_token
from tests.chaos.harness import invariants, report, scale, serving

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


LONE_SURROGATE = "\ud800"


def with_lone_surrogate(value: Any) -> tuple[Any, bool]:
    """``value`` with a lone surrogate appended to every string in it (keys too); whether any
    string was found."""
    if isinstance(value, str):
        return value + LONE_SURROGATE, True
    if isinstance(value, list):
        items = [with_lone_surrogate(v) for v in value]
        return [v for v, _ in items], any(found for _, found in items)
    if isinstance(value, dict):
        found = False
        out = {}
        for key, item in value.items():
            new, hit = with_lone_surrogate(item)
            out[key] = new
            found = found or hit
        return out, found
    return value, False


async def test_a_lone_surrogate_in_any_rest_body_is_a_client_error(
    pool: asyncpg.Pool, database_url: str, tmp_path: Path
) -> None:
    """``"\\ud800"`` is valid JSON text but no valid Unicode: it cannot reach PostgreSQL (UTF-8).
    Every operation that takes a body, with bodies generated from its schema and a lone
    surrogate escaped into every string of them (or an extra member when they have none), gets
    a 4xx with a message, and nothing is written."""
    alice, bob = uuid4(), uuid4()
    async with pool.acquire() as conn:
        chat = await commands.create_chat(conn, creator=alice, title="surrogate", members=[bob])
        await commands.send_message(conn, chat_id=chat, sender=alice, body="seed")
    before = await pool.fetchval("SELECT count(*) FROM messenger.realtime_outbox")
    async with serving(database_url, tmp_path) as serve:
        headers = {
            "Authorization": f"Bearer {make_token(alice, ttl=3600)}",
            "Content-Type": "application/json",
        }
        schema = schemathesis.openapi.from_url(f"{serve.http_url}/openapi.json")
        answers: dict[str, set[int]] = {}
        wrong: list[str] = []

        def fuzz_all() -> None:
            import httpx

            with httpx.Client(base_url=serve.http_url, headers=headers, timeout=30) as http:
                for result in schema.get_all_operations():
                    operation = result.ok()
                    if not operation.definition.raw.get("requestBody"):
                        continue

                    @settings(
                        max_examples=3,
                        deadline=None,
                        database=None,
                        suppress_health_check=list(HealthCheck),
                    )
                    @given(case=operation.as_strategy())
                    def fuzz(case: Any) -> None:
                        body, found = with_lone_surrogate(case.body)
                        if not found:
                            body = {"note": LONE_SURROGATE, "value": body}
                        # json.dumps escapes it as \\ud800 (ensure_ascii): valid JSON text.
                        content = json.dumps(body).encode()
                        assert b"\\ud800" in content
                        response = http.request(
                            case.method,
                            case.formatted_path,
                            params=case.query,
                            content=content,
                        )
                        key = f"{case.method} {case.operation.path}"
                        answers.setdefault(key, set()).add(response.status_code)
                        message = response.json().get("message") if response.content else None
                        if not (400 <= response.status_code < 500 and message) or (
                            "surrogate" not in message
                        ):
                            wrong.append(f"{key} -> {response.status_code} {response.text[:200]}")

                    fuzz()

        await asyncio.to_thread(fuzz_all)
    assert answers, "no operation with a body"
    assert not wrong, wrong
    await invariants(pool)
    assert await pool.fetchval("SELECT count(*) FROM messenger.realtime_outbox") == before
    report(
        "lone surrogate in every REST body",
        operations=len(answers),
        statuses={k: sorted(v) for k, v in sorted(answers.items())},
    )
