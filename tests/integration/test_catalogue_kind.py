"""A built-in kind added the way docs/architecture.md says ("Adding a built-in kind"): its row in
the catalogue (with its enum member beside it) and its contract, nothing else. A copy of the
package gets exactly those two edits, and a process running the copy registers the kind, takes
its outbox rows, builds their payloads from the manifest query the row names and pushes them,
against the real database; the package as it is refuses the same row."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any
from uuid import uuid4

import asyncpg
import pytest

from tests.integration.support import new_chat

ROOT = Path(__file__).resolve().parents[2]
KIND = "ChatEventLogged"
ROW = "ChatEventLogged             chat    ref     chats       chat_events\n"
MEMBER = '    CHAT_EVENT_LOGGED = "ChatEventLogged"\n'
CONTRACT = """

class ChatEventLogged(PushPayload):
    chat_id: KeyId
    chat_event_id: KeyId
    event_kind: str
    subject_user_id: KeyId | None = None
    occurred_at: datetime
"""

RUN = """
import asyncio, json, sys
import asyncpg
from realtime_dispatch.manifest.contract import CONTRACT
from realtime_dispatch.manifest.manifest import shipped_manifest
from realtime_dispatch.manifest.registry import register_kinds
from tests.integration.support import make_stack

async def main(url):
    pool = await asyncpg.create_pool(url, min_size=1, max_size=8)
    async with pool.acquire() as conn:
        await register_kinds(conn, shipped_manifest())
    stack = make_stack(pool)
    report = await stack.dispatcher.run_pass()
    rows = await pool.fetch("SELECT id, status, last_error FROM messenger.realtime_outbox")
    print(json.dumps({
        "serves": CONTRACT["chat_events"].serves,
        "dispatched": report.dispatched,
        "pushes": [[p.group, p.target, p.payload_json.decode()] for p in stack.publisher.pushes],
        "rows": {str(r["id"]): [r["status"], r["last_error"]] for r in rows},
    }))
    await pool.close()

asyncio.run(main(sys.argv[1]))
"""


def with_the_kind(tmp: Path) -> Path:
    """A copy of the package with the kind's row, its enum member and its contract."""
    src = tmp / "src"
    shutil.copytree(ROOT / "src", src, ignore=shutil.ignore_patterns("__pycache__"))
    catalogue = src / "realtime_dispatch/values/catalogue.py"
    text = catalogue.read_text()
    last_row = "BlacklistChanged            user    ref     contacts    blacklist\n"
    last_member = '    BLACKLIST_CHANGED = "BlacklistChanged"\n'
    assert last_row in text
    assert last_member in text
    text = text.replace(last_row, last_row + ROW).replace(last_member, last_member + MEMBER)
    catalogue.write_text(text)
    contracts = src / "realtime_dispatch/contracts/chats.py"
    contracts.write_text(contracts.read_text() + CONTRACT)
    return src


async def outbox_row(pool: asyncpg.Pool, chat: object, ref: object) -> str:
    return str(
        await pool.fetchval(
            "INSERT INTO messenger.realtime_outbox (kind, target_kind, chat_id, ref_id)"
            " VALUES ($1, 'ChatGroup', $2, $3) RETURNING id",
            KIND,
            chat,
            ref,
        )
    )


async def test_a_kind_added_by_its_row_and_contract_is_routed_built_and_pushed(
    pool: asyncpg.Pool, database_url: str, tmp_path: Path
) -> None:
    chat, actor = await new_chat(pool)
    other, _ = await new_chat(pool)
    event = uuid4()
    await pool.execute(
        "INSERT INTO messenger.chat_events (id, chat_id, event_kind, actor_user_id)"
        " VALUES ($1, $2, 'TitleChanged', $3)",
        event,
        chat,
        actor,
    )
    with pytest.raises(asyncpg.PostgresError, match=KIND):
        await outbox_row(pool, chat, event)  # the package as it is: no such kind

    src = with_the_kind(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(src), str(ROOT)])}
    script = tmp_path / "run.py"
    script.write_text(RUN)

    def run() -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, str(script), database_url],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.splitlines()[-1])  # type: ignore[no-any-return]  # logs first

    # The copy starts (registering its kinds, as every process does) and finds nothing to do.
    started = await asyncio.to_thread(run)
    assert started["serves"] == f"ChatUpdated, {KIND}"  # the manifest contract follows the row
    assert started["dispatched"] == 0
    # Now rows of the new kind are accepted: one of its own chat, one naming another's event.
    good = await outbox_row(pool, chat, event)
    mismatched = await outbox_row(pool, other, event)
    out = await asyncio.to_thread(run)
    assert out["dispatched"] == 1
    ((group, target, payload_json),) = out["pushes"]
    assert (group, target) == (f"chat:{chat}", "chat_event_logged")
    payload = json.loads(payload_json)
    occurred = await pool.fetchval(
        "SELECT occurred_at FROM messenger.chat_events WHERE id = $1", event
    )
    assert payload == {
        "eventId": good,
        "chatId": str(chat),
        "chatEventId": str(event),
        "eventKind": "TitleChanged",
        "occurredAt": occurred.isoformat().replace("+00:00", "Z"),
    }
    assert out["rows"][good] == ["Done", None]
    status, error = out["rows"][mismatched]
    assert status == "Quarantined"
    assert "TargetMismatch" in error
