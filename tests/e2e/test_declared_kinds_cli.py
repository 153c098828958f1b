"""Declared kinds through the real command: ``migrate`` and ``check`` register them (the outbox
then accepts their rows, and still refuses a kind nobody declared, in the writer's
transaction), ``kinds --typescript`` types their payloads, and a bad declaration stops
``migrate``, ``check``, ``worker``, ``hub`` and ``serve`` with one line naming the kind and
the reason (exit 2)."""

from __future__ import annotations

from pathlib import Path
from uuid import uuid4

import asyncpg
import pytest

from support.hub_wire import SECRET, SERVICE_KEY
from support.procs import cli_env, run_cli, side_by_side

pytestmark = pytest.mark.e2e

SCHEMA = """
CREATE SCHEMA app;
CREATE TABLE app.member (user_id uuid, chat_id uuid);
CREATE TABLE app.reaction (id uuid PRIMARY KEY, message_id uuid, user_id uuid, emoji text,
                           created_at timestamptz NOT NULL DEFAULT now(), raw bytea);
"""
MANIFEST = """
-- name: member_chats
SELECT user_id, chat_id FROM app.member WHERE user_id = ANY($1);

-- kind: ReactionAdded
-- target: chat
-- event: reaction_added
SELECT r.id AS ref_id, r.message_id, r.user_id, r.emoji, r.created_at
FROM app.reaction r WHERE r.id = ANY($1);

-- kind: ReactionRemoved
-- target: chat
-- event: reaction_removed
-- payload: ids
"""


def _one_line(run: object, expected: str) -> None:
    returncode, stderr = run.returncode, run.stderr  # type: ignore[attr-defined]
    assert returncode == 2, stderr
    assert stderr.strip().splitlines() == [expected], stderr


async def test_declared_kinds_are_registered_typed_and_bad_ones_stop_every_start(
    empty_database: str, tmp_path: Path
) -> None:
    conn = await asyncpg.connect(empty_database)
    try:
        await conn.execute(SCHEMA)
        manifest = tmp_path / "projections.sql"
        manifest.write_text(MANIFEST)
        env = cli_env(REALTIME_DATABASE_URL=empty_database, REALTIME_PROJECTIONS=str(manifest))
        migrated = run_cli("migrate", env=env)
        assert migrated.returncode == 0, migrated.stderr
        checked, typed = await side_by_side([(["check"], env), (["kinds", "--typescript"], env)])
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert "kind ReactionAdded: ok (event reaction_added to chat)" in checked.stdout
        assert "kind ReactionRemoved: ok (ids only, event reaction_removed to chat)" in (
            checked.stdout
        )
        assert typed.returncode == 0, typed.stderr
        assert "export interface ReactionAddedPayload {" in typed.stdout
        assert "  emoji: string | null;" in typed.stdout
        assert "  reaction_removed: ReactionRemovedPayload;" in typed.stdout

        insert = (
            "INSERT INTO messenger.realtime_outbox (kind, target_kind, chat_id, ref_id)"
            " VALUES ($1, 'ChatGroup', $2, $3)"
        )
        await conn.execute(insert, "ReactionAdded", uuid4(), uuid4())
        await conn.execute(insert, "MessageReceived", uuid4(), uuid4())  # built in
        with pytest.raises(asyncpg.CheckViolationError, match="ReactionAdd3d"):
            await conn.execute(insert, "ReactionAdd3d", uuid4(), uuid4())

        # Bad declarations, found by reading the file: every start refuses them.
        parse_bad = tmp_path / "parse_bad.sql"
        parse_bad.write_text(MANIFEST.replace("ReactionRemoved", "MessageDeleted"))
        bad_env = {
            **env,
            "REALTIME_PROJECTIONS": str(parse_bad),
            "REALTIME_HUB_URL": "http://127.0.0.1:9",
            "REALTIME_HUB_SERVICE_KEY": SERVICE_KEY,
            "REALTIME_HUB_JWT_SECRET": SECRET,
        }
        column_bad = tmp_path / "column_bad.sql"
        column_bad.write_text(MANIFEST.replace("r.created_at\n", "r.created_at, r.raw\n"))
        column_env = {**bad_env, "REALTIME_PROJECTIONS": str(column_bad)}
        parse_line = (
            "realtime-dispatch: invalid setting REALTIME_PROJECTIONS: kind MessageDeleted:"
            f" a built-in kind (declare only the app's own) ({parse_bad})"
        )
        # Found by preparing the query: a column with no JSON form.
        column_line = (
            "realtime-dispatch: invalid setting REALTIME_PROJECTIONS: kind ReactionAdded:"
            " column raw cannot be sent: bytea: encode it (encode(col, 'base64'))"
            f" ({column_bad})"
        )
        parse_starts = [["migrate"], ["check"], ["worker"], ["hub", "--port", "9"], ["serve"]]
        column_starts = [["worker"], ["hub", "--port", "9"], ["check"]]
        runs = await side_by_side(
            [(args, bad_env) for args in parse_starts]
            + [(args, column_env) for args in column_starts]
        )
        for run in runs[: len(parse_starts)]:
            _one_line(run, parse_line)
        *started, checked = runs[len(parse_starts) :]
        for run in started:
            _one_line(run, column_line)
        assert checked.returncode == 2
        assert (
            "kind ReactionAdded: column raw cannot be sent: bytea: encode it"
            " (encode(col, 'base64'))" in checked.stdout.splitlines()
        )
    finally:
        await conn.close()
