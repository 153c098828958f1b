"""The /ops page in headless Chromium and its API's access rules, on a real database."""

import contextlib
from collections.abc import AsyncIterator
from uuid import uuid4

import asyncpg
import httpx
import pytest
from playwright.async_api import async_playwright
from starlette.applications import Starlette

from realtime_dispatch.auth.tokens import TokenVerifier
from realtime_dispatch.ops.routes import ops_routes
from realtime_dispatch.ops.service import OpsService
from support.hub_wire import SECRET, make_token
from tests.e2e.browser import CHROMIUM, CHROMIUM_ARGS
from tests.errors_support import quarantine_rows
from tests.local_server import serving


@contextlib.asynccontextmanager
async def ops_server(pool: asyncpg.Pool) -> AsyncIterator[str]:
    app = Starlette(routes=ops_routes(OpsService(pool), TokenVerifier(SECRET)))
    async with serving(app) as url:
        yield url


async def test_api_refuses_missing_bad_and_non_admin_tokens(pool: asyncpg.Pool) -> None:
    async with ops_server(pool) as url, httpx.AsyncClient(base_url=url) as http:
        assert (await http.get("/ops/api/summary")).status_code == 401
        bad = {"Authorization": "Bearer " + make_token(uuid4(), secret="x" * 40)}
        assert (await http.get("/ops/api/summary", headers=bad)).status_code == 401
        user = {"Authorization": "Bearer " + make_token(uuid4())}
        forbidden = await http.get("/ops/api/summary", headers=user)
        assert forbidden.status_code == 403
        admin = {"Authorization": "Bearer " + make_token(uuid4(), role="admin")}
        summary = await http.get("/ops/api/summary", headers=admin)
        assert summary.status_code == 200
        assert {"done": 0, "targetGone": 0}.items() <= summary.json()["stats"].items()
        invalid = await http.post("/ops/api/requeue", headers=admin, json={"kind": "no kind"})
        assert invalid.status_code == 422
        # Any kind's name is taken (a declared kind's too); nothing of it is quarantined here.
        unknown = await http.post("/ops/api/requeue", headers=admin, json={"kind": "Bogus"})
        assert (unknown.status_code, unknown.json()) == (200, {"requeued": 0})
        both = await http.post(
            "/ops/api/requeue",
            headers=admin,
            json={"kind": "ContactRemoved", "ids": [str(uuid4())]},
        )
        assert both.status_code == 422
        assert both.json() == {"error": "give exactly one of ids, kind"}
        assert (await http.get("/ops/api/quarantined?limit=0", headers=admin)).status_code == 400


async def test_revocations_api_revokes_lists_and_lifts(pool: asyncpg.Pool) -> None:
    user = uuid4()
    async with ops_server(pool) as url, httpx.AsyncClient(base_url=url) as http:
        admin = {"Authorization": "Bearer " + make_token(uuid4(), role="admin")}
        plain = {"Authorization": "Bearer " + make_token(uuid4())}
        body = {"userId": str(user)}
        assert (await http.post("/ops/api/revocations", json=body)).status_code == 401
        assert (
            await http.post("/ops/api/revocations", json=body, headers=plain)
        ).status_code == 403
        bad = await http.post("/ops/api/revocations", json={"userId": "bob"}, headers=admin)
        assert bad.status_code == 422
        assert bad.json()["error"].startswith("userId:")
        revoked = await http.post("/ops/api/revocations", json=body, headers=admin)
        assert revoked.status_code == 201
        assert revoked.json()["userId"] == str(user)
        stored = await pool.fetchval(
            "SELECT revoked_at FROM messenger.realtime_revocations WHERE user_id = $1", user
        )
        assert revoked.json()["revokedAt"] == stored.isoformat()
        listed = await http.get("/ops/api/revocations", headers=admin)
        assert listed.json() == {"items": [revoked.json()]}
        path = f"/ops/api/revocations/{user}"
        assert (await http.delete(path, headers=plain)).status_code == 403
        assert (await http.delete(path, headers=admin)).json() == revoked.json()
        assert (await http.delete(path, headers=admin)).status_code == 404
        assert (await http.delete("/ops/api/revocations/x", headers=admin)).status_code == 400
        assert (await http.get("/ops/api/revocations", headers=admin)).json() == {"items": []}


async def test_summary_reports_the_lock_holder(pool: asyncpg.Pool, database_url: str) -> None:
    holder = await asyncpg.connect(database_url, server_settings={"application_name": "operator"})
    try:
        await holder.execute(
            "SELECT pg_advisory_lock("
            "hashtextextended('job:scheduled:messenger-realtime-dispatch', 0))"
        )
        lock = await OpsService(pool).lock_holder()
        assert lock is not None
        assert lock.application_name == "operator"
        assert lock.pid == await holder.fetchval("SELECT pg_backend_pid()")
    finally:
        await holder.close()
    assert await OpsService(pool).lock_holder() is None


@pytest.mark.e2e
async def test_page_shows_quarantine_and_requeues_in_a_browser(pool: asyncpg.Pool) -> None:
    ids = await quarantine_rows(pool, 3, kind="ContactRemoved")
    [other] = await quarantine_rows(pool, 1, kind="BlacklistChanged")
    token = make_token(uuid4(), role="admin")
    async with ops_server(pool) as url, async_playwright() as p:
        browser = await p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = await browser.new_page()
            await page.goto(f"{url}/ops#token={token}")
            await page.wait_for_selector("#rows tr")
            assert await page.locator("#rows tr").count() == 4
            assert await page.text_content("#quarantined") == "4"
            assert "no outcome" in (await page.text_content("#rows") or "")
            # One row, by its own button.
            await page.locator(f'#rows tr[data-id="{ids[0]}"] button').click()
            await page.wait_for_function("document.querySelectorAll('#rows tr').length === 3")
            # A whole kind, by the kind button.
            await page.locator('#kinds button[data-kind="ContactRemoved"]').click()
            await page.wait_for_function("document.querySelectorAll('#rows tr').length === 1")
            assert await page.locator(f'#rows tr[data-id="{other}"]').count() == 1
            points = await page.get_attribute("#pending-line", "points")
            assert points
            assert (
                await page.text_content("#lock")
                == "free (between passes, or no dispatcher running)"
            )
            # The token never ends up in the address bar.
            assert "token" not in page.url
        finally:
            await browser.close()
    statuses = await pool.fetch("SELECT id, status, attempts FROM messenger.realtime_outbox")
    by_id = {r["id"]: (r["status"], r["attempts"]) for r in statuses}
    assert all(by_id[i] == ("Pending", 0) for i in ids)
    assert by_id[other][0] == "Quarantined"
