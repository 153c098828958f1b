"""The app's own kinds declared in the manifest, against the real database: registered at
start, accepted by the outbox in the writer's transaction (an undeclared kind fails there),
built with one statement per batch (columns in camelCase, json as JSON, eventId and chatId),
ids-only kinds, TargetMismatch, the deleted_chats rule and its opt-out, KindUndeclared for a
row whose kind was taken out of the manifest, requeue by a declared kind, and check's verdicts
on bad declarations."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import SimpleNamespace
from uuid import UUID, uuid4

import asyncpg
import orjson
import pytest

from realtime_dispatch.delivery.push import Push
from realtime_dispatch.dispatch.projections.builder import Spare
from realtime_dispatch.dispatch.projections.registry import default_payload_builder
from realtime_dispatch.errors import ConfigurationError
from realtime_dispatch.manifest.check import check_manifest, require_valid
from realtime_dispatch.manifest.manifest import Manifest, parse_manifest, shipped_manifest
from realtime_dispatch.manifest.registry import register_kinds
from realtime_dispatch.values.catalogue import CATALOGUE
from support.procs import wait_until
from tests.integration.support import make_stack, new_chat, row, send

SOURCE = "/etc/realtime/projections.sql"

APP_SCHEMA = """
CREATE SCHEMA app;
CREATE TABLE app.reaction (
    id uuid PRIMARY KEY, chat_id uuid NOT NULL, message_id uuid NOT NULL, user_id uuid NOT NULL,
    emoji text NOT NULL, meta jsonb, weight numeric, created_at timestamptz NOT NULL DEFAULT now()
);
"""

REACTION_ADDED = """
-- kind: ReactionAdded
-- target: chat
-- event: reaction_added
SELECT r.id AS ref_id, r.chat_id, r.message_id, r.user_id, r.emoji, r.meta, r.weight, r.created_at
FROM app.reaction r WHERE r.id = ANY($1);
"""
REACTION_REMOVED = """
-- kind: ReactionRemoved
-- target: chat
-- event: reaction_removed
-- payload: ids
"""
CHAT_CLOSED = """
-- kind: ConversationClosed
-- target: chat
-- event: conversation_closed
-- deleted_chats: deliver
SELECT r.id AS ref_id FROM app.reaction r WHERE r.id = ANY($1);
"""
NUDGED = """
-- kind: UserNudged
-- target: user
-- event: user_nudged
-- payload: ids
"""


def with_kinds(*blocks: str) -> Manifest:
    named = "".join(f"-- name: {n}\n{q};\n" for n, q in shipped_manifest().queries.items())
    return parse_manifest(named + "".join(blocks), SOURCE)


@pytest.fixture
async def app(pool: asyncpg.Pool) -> Manifest:
    manifest = with_kinds(REACTION_ADDED, REACTION_REMOVED, CHAT_CLOSED, NUDGED)
    async with pool.acquire() as conn:
        await conn.execute(APP_SCHEMA)
        await require_valid(conn, manifest, needs=("hub",))
        await register_kinds(conn, manifest)
    return manifest


async def enqueue(
    conn: asyncpg.Connection | asyncpg.Pool,
    kind: str,
    *,
    chat: UUID | None = None,
    ref: UUID | None = None,
    user: UUID | None = None,
    message: UUID | None = None,
    seq: int | None = None,
) -> UUID:
    target = "User" if user is not None and chat is None else "ChatGroup"
    return await conn.fetchval(  # type: ignore[no-any-return]
        "INSERT INTO messenger.realtime_outbox"
        " (kind, target_kind, chat_id, target_user_id, ref_id, message_id, seq)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
        kind,
        target,
        chat,
        user,
        ref,
        message,
        seq,
    )


async def reaction(pool: asyncpg.Pool, chat: UUID, **columns: object) -> UUID:
    ref = uuid4()
    await pool.execute(
        "INSERT INTO app.reaction (id, chat_id, message_id, user_id, emoji, meta, weight)"
        " VALUES ($1, $2, $3, $4, $5, $6, $7)",
        ref,
        columns.get("chat_id", chat),
        uuid4(),
        uuid4(),
        "👍",
        columns.get("meta"),
        columns.get("weight"),
    )
    return ref


async def test_a_declared_kind_is_built_from_its_query_and_delivered(
    pool: asyncpg.Pool, app: Manifest
) -> None:
    chat, _ = await new_chat(pool)
    ref = await reaction(pool, chat, meta='{"skin": 3, "tags": ["a"]}', weight="1.50")
    entry = await enqueue(pool, "ReactionAdded", chat=chat, ref=ref)
    stack = make_stack(pool, builder=default_payload_builder(manifest=app))
    report = await stack.dispatcher.run_pass()
    assert report.dispatched == 1
    (push,) = stack.publisher.pushes
    assert (push.group, push.target) == (f"chat:{chat}", "reaction_added")
    payload = orjson.loads(push.payload_json)
    record = await pool.fetchrow("SELECT * FROM app.reaction WHERE id = $1", ref)
    assert record is not None
    assert list(payload) == [
        "eventId",
        "chatId",
        "refId",
        "messageId",
        "userId",
        "emoji",
        "meta",
        "weight",
        "createdAt",
    ]
    assert payload["eventId"] == str(entry)
    assert payload["chatId"] == str(chat)
    assert payload["refId"] == str(ref)
    assert payload["messageId"] == str(record["message_id"])
    assert payload["meta"] == {"skin": 3, "tags": ["a"]}
    assert payload["weight"] == "1.50"
    assert payload["createdAt"].endswith("Z")
    assert (await row(pool, entry))["status"] == "Done"
    assert stack.metrics.dispatched.labels("ReactionAdded")._value.get() == 1


class CountingConnection:
    """The real connection, its ``fetch`` statements noted."""

    def __init__(self, conn: object) -> None:
        self.conn = conn
        self.fetched: list[str] = []

    async def fetch(self, sql: str, *args: object) -> object:
        self.fetched.append(sql)
        return await self.conn.fetch(sql, *args)  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self.conn, name)


async def test_one_statement_per_batch_for_a_declared_kind(
    pool: asyncpg.Pool, app: Manifest
) -> None:
    chat, _ = await new_chat(pool)
    for _ in range(5):
        await enqueue(pool, "ReactionAdded", chat=chat, ref=await reaction(pool, chat))
    query = app.kind("ReactionAdded").sql  # type: ignore[union-attr]
    builder = default_payload_builder(manifest=app)
    rows = await make_stack(pool).store.claim(200)
    async with pool.acquire() as conn:
        counting = CountingConnection(conn)
        built = await builder.build(counting, rows)  # type: ignore[arg-type]
    calls = counting.fetched.count(query)
    assert calls == 1
    assert len(built) == 5


class MeetingConnection(CountingConnection):
    """A real connection whose statements wait at ``barrier`` first: two of them pass only if
    they were issued at once (one after the other, the first would wait forever)."""

    def __init__(self, conn: object, barrier: asyncio.Barrier) -> None:
        super().__init__(conn)
        self.barrier = barrier

    async def fetch(self, sql: str, *args: object) -> object:
        await asyncio.wait_for(self.barrier.wait(), 10)
        return await super().fetch(sql, *args)


async def test_a_batch_of_two_kinds_runs_their_statements_at_once(
    pool: asyncpg.Pool, app: Manifest
) -> None:
    """A built-in kind and a declared one in one batch: each statement on its own connection,
    both issued before either answered, and every payload as a build on one connection makes
    it."""
    chat, sender = await new_chat(pool)
    for _ in range(3):
        await send(pool, chat, sender)
        await enqueue(pool, "ReactionAdded", chat=chat, ref=await reaction(pool, chat))
    rows = await make_stack(pool).store.claim(200)
    builder = default_payload_builder(manifest=app)
    barrier = asyncio.Barrier(2)
    async with pool.acquire() as first, pool.acquire() as second:
        conns = [MeetingConnection(first, barrier), MeetingConnection(second, barrier)]
        asked: list[int] = []

        def spare(wanted: int) -> list[object]:
            asked.append(wanted)
            return conns[1:]

        together = await builder.build(conns[0], rows, spare=spare)  # type: ignore[arg-type]
        alone = await builder.build(first, rows)
    assert asked == [1]
    assert [len(c.fetched) for c in conns] == [1, 1]
    assert {c.fetched[0] for c in conns} == {app.sql("messages"), app.kind("ReactionAdded").sql}  # type: ignore[union-attr]
    assert len(together) == 6
    assert all(isinstance(r, Push) for r in together.values())
    assert {k: v.payload_json for k, v in together.items()} == {  # type: ignore[union-attr]
        k: v.payload_json  # type: ignore[union-attr]
        for k, v in alone.items()
    }


async def test_pushes_of_a_chat_keep_outbox_order_across_kinds_built_at_once(
    pool: asyncpg.Pool, app: Manifest
) -> None:
    """Kinds alternating in one chat, batches of four (two kind groups each, built at once once
    the pass's spare connections are open): the pushes go out in outbox order."""
    chat, sender = await new_chat(pool)
    written: list[str] = []
    for _ in range(12):
        sent = await send(pool, chat, sender)
        written.append(str(sent.outbox_id))
        written.append(
            str(await enqueue(pool, "ReactionAdded", chat=chat, ref=await reaction(pool, chat)))
        )
    inner = default_payload_builder(manifest=app)
    given: list[int] = []

    async def build(conn: object, rows: object, *, spare: Spare | None = None) -> object:
        assert spare is not None
        if not given:
            # The pass's first batch finds no spare lane open (they open in the background);
            # built slower than an opening here, it leaves one open for the next batches.
            given.append(len(spare(1)))
            await wait_until(lambda: spare(1))

        def noted(wanted: int) -> Sequence[object]:
            assert spare is not None
            conns = spare(wanted)
            given.append(len(conns))
            return conns

        return await inner.build(conn, rows, spare=noted)  # type: ignore[arg-type]

    builder = SimpleNamespace(build=build)
    stack = make_stack(pool, builder=builder, batch_size=4)  # type: ignore[arg-type]
    report = await stack.dispatcher.run_pass()
    assert report.dispatched == 24
    assert given[0] == 0  # the pass's first batch: none open yet, opened for the next ones
    assert len(given) > 1
    assert all(n >= 1 for n in given[1:])  # then every batch's groups at once
    assert [orjson.loads(p.payload_json)["eventId"] for p in stack.publisher.pushes] == written


async def test_ids_only_kind_is_written_beside_the_delete(
    pool: asyncpg.Pool, app: Manifest
) -> None:
    chat, _ = await new_chat(pool)
    ref = await reaction(pool, chat)
    message = uuid4()
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute("DELETE FROM app.reaction WHERE id = $1", ref)
        entry = await enqueue(conn, "ReactionRemoved", chat=chat, ref=ref, message=message, seq=4)
    user = uuid4()
    nudge = await enqueue(pool, "UserNudged", user=user, ref=ref)
    stack = make_stack(pool, builder=default_payload_builder(manifest=app))
    assert (await stack.dispatcher.run_pass()).dispatched == 2
    by_target = {p.target: p for p in stack.publisher.pushes}
    removed, nudged = by_target["reaction_removed"], by_target["user_nudged"]
    assert (removed.group, orjson.loads(removed.payload_json)) == (
        f"chat:{chat}",
        {
            "eventId": str(entry),
            "chatId": str(chat),
            "refId": str(ref),
            "messageId": str(message),
            "seq": 4,
        },
    )
    assert (nudged.group, orjson.loads(nudged.payload_json)) == (
        f"user:{user}",
        {"eventId": str(nudge), "refId": str(ref), "targetUserId": str(user)},
    )


async def test_the_outbox_refuses_an_undeclared_kind_in_the_writers_transaction(
    pool: asyncpg.Pool, app: Manifest
) -> None:
    chat, _ = await new_chat(pool)
    async with pool.acquire() as conn:

        async def write_both() -> None:
            async with conn.transaction():
                await enqueue(conn, "ReactionAdded", chat=chat, ref=uuid4())
                await enqueue(conn, "ReactionAdde", chat=chat, ref=uuid4())  # a typo

        with pytest.raises(asyncpg.CheckViolationError, match='kind "ReactionAdde" is not'):
            await write_both()
        # The whole transaction is gone, the declared row with it.
        assert await conn.fetchval("SELECT count(*) FROM messenger.realtime_outbox") == 0
        with pytest.raises(asyncpg.CheckViolationError, match="goes to a ChatGroup, not a User"):
            await enqueue(conn, "ReactionAdded", user=uuid4(), ref=uuid4())


async def test_a_missing_entity_follows_the_deleted_chats_rule(
    pool: asyncpg.Pool, app: Manifest
) -> None:
    live, _ = await new_chat(pool)
    gone, _ = await new_chat(pool)
    typo = await enqueue(pool, "ReactionAdded", chat=live, ref=uuid4())  # a mistyped id
    await pool.execute("DELETE FROM messenger.chats WHERE id = $1", gone)  # leaves a tombstone
    after_delete = await enqueue(pool, "ReactionAdded", chat=gone, ref=uuid4())
    closed = await enqueue(pool, "ConversationClosed", chat=gone, ref=uuid4())
    stack = make_stack(pool, builder=default_payload_builder(manifest=app))
    await stack.dispatcher.run_pass()
    typo_row = await row(pool, typo)
    assert typo_row["status"] == "Quarantined"
    assert "ReactionAddedNotFound" in typo_row["last_error"]
    gone_row = await row(pool, after_delete)
    assert (gone_row["status"], gone_row["last_error"].split(":")[0]) == ("Done", "TargetGone")
    # A kind that announces the chat's end is delivered although the chat is deleted.
    assert (await row(pool, closed))["status"] == "Done"
    (push,) = [p for p in stack.publisher.pushes if p.target == "conversation_closed"]
    assert orjson.loads(push.payload_json)["chatId"] == str(gone)


async def test_a_query_returning_another_chat_is_a_target_mismatch(
    pool: asyncpg.Pool, app: Manifest
) -> None:
    chat, _ = await new_chat(pool)
    other, _ = await new_chat(pool)
    ref = await reaction(pool, chat, chat_id=other)
    entry = await enqueue(pool, "ReactionAdded", chat=chat, ref=ref)
    stack = make_stack(pool, builder=default_payload_builder(manifest=app))
    await stack.dispatcher.run_pass()
    assert stack.publisher.pushes == []
    quarantined = await row(pool, entry)
    assert quarantined["status"] == "Quarantined"
    assert "TargetMismatch" in quarantined["last_error"]


async def test_a_kind_taken_out_of_the_manifest_is_quarantined_and_requeued_later(
    pool: asyncpg.Pool, app: Manifest
) -> None:
    chat, _ = await new_chat(pool)
    entry = await enqueue(pool, "ReactionRemoved", chat=chat, ref=uuid4())
    without = with_kinds(REACTION_ADDED)  # ReactionRemoved no longer declared
    stack = make_stack(pool, builder=default_payload_builder(manifest=without))
    await stack.dispatcher.run_pass()
    quarantined = await row(pool, entry)
    assert quarantined["status"] == "Quarantined"
    assert "KindUndeclared" in quarantined["last_error"]
    assert stack.metrics.quarantined.labels("ReactionRemoved")._value.get() == 1
    # Declared again: requeue by kind, delivered.
    assert await stack.store.requeue(kind="ReactionRemoved") == 1
    again = make_stack(pool, builder=default_payload_builder(manifest=app))
    assert (await again.dispatcher.run_pass()).dispatched == 1
    assert (await row(pool, entry))["status"] == "Done"


@pytest.mark.parametrize(
    ("block", "problem"),
    [
        (
            "-- kind: Bytes\n-- target: chat\n-- event: bytes\n"
            "SELECT id AS ref_id, decode('00', 'hex') AS blob FROM app.reaction"
            " WHERE id = ANY($1)",
            "kind Bytes: column blob cannot be sent: bytea: encode it",
        ),
        (
            "-- kind: Naive\n-- target: chat\n-- event: naive\n"
            "SELECT id AS ref_id, created_at::timestamp AS at FROM app.reaction"
            " WHERE id = ANY($1)",
            "kind Naive: column at cannot be sent: timestamp without time zone: use timestamptz",
        ),
        (
            "-- kind: NoRef\n-- target: chat\n-- event: no_ref\n"
            "SELECT id FROM app.reaction WHERE id = ANY($1)",
            "kind NoRef: column ref_id missing",
        ),
        (
            "-- kind: TextChat\n-- target: chat\n-- event: text_chat\n"
            "SELECT id AS ref_id, chat_id::text AS chat_id FROM app.reaction WHERE id = ANY($1)",
            "kind TextChat: column chat_id is text, expected uuid (compared with the row's)",
        ),
        (
            "-- kind: OneKey\n-- target: user\n-- event: one_key\n"
            "SELECT id AS ref_id FROM app.reaction WHERE id = $1",
            "kind OneKey: takes (uuid), expected one parameter $1 uuid[]",
        ),
        (
            "-- kind: Broken\n-- target: chat\n-- event: broken\n"
            "SELECT id AS ref_id FROM app.no_such WHERE id = ANY($1)",
            'kind Broken: does not prepare: relation "app.no_such" does not exist',
        ),
    ],
)
async def test_a_declared_query_that_cannot_build_is_one_line_naming_the_kind(
    pool: asyncpg.Pool, app: Manifest, block: str, problem: str
) -> None:
    manifest = with_kinds(block)
    async with pool.acquire() as conn:
        with pytest.raises(ConfigurationError) as caught:
            await require_valid(conn, manifest, needs=())
        lines = [r.line() for r in await check_manifest(conn, manifest, needs=())]
    message = str(caught.value)
    assert message.startswith(f"REALTIME_PROJECTIONS: {problem}"), message
    assert message.endswith(f"({SOURCE})")
    assert "\n" not in message
    assert any(line.startswith(problem) for line in lines)


async def test_the_registry_holds_the_catalogue_and_the_declared_kinds(
    pool: asyncpg.Pool, app: Manifest
) -> None:
    records = await pool.fetch(
        "SELECT kind, target_kind, event, builtin FROM messenger.realtime_kinds ORDER BY kind"
    )
    builtin = {(r["kind"], r["target_kind"], r["event"]) for r in records if r["builtin"]}
    assert builtin == {(e.kind, e.target_kind, e.event) for e in CATALOGUE}
    declared = {(r["kind"], r["target_kind"], r["event"]) for r in records if not r["builtin"]}
    assert declared == {(k.name, k.target_kind.value, k.event) for k in app.kinds}
    # Registering again changes nothing.
    async with pool.acquire() as conn:
        assert await register_kinds(conn, app) == []


TOMBSTONES = """
CREATE TABLE app.message_tombstones (
    id uuid PRIMARY KEY, chat_id uuid NOT NULL, seq bigint NOT NULL,
    deleted_at timestamptz NOT NULL DEFAULT now());
CREATE FUNCTION app.message_tombstone() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO app.message_tombstones (id, chat_id, seq) VALUES (OLD.id, OLD.chat_id, OLD.seq)
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;
CREATE TRIGGER message_tombstone AFTER DELETE ON messenger.messages
    FOR EACH ROW EXECUTE FUNCTION app.message_tombstone();
"""


async def test_a_hard_deleted_message_reaches_the_clients_through_a_tombstone(
    pool: asyncpg.Pool, app: Manifest
) -> None:
    """docs/adopting.md, "Hard-deleted messages": the messages query reads a tombstone, and
    MessageDeleted written with the DELETE is delivered (no content), not MessageNotFound."""
    await pool.execute(TOMBSTONES)
    messages = (
        shipped_manifest().sql("messages")
        + " UNION ALL SELECT t.id, t.chat_id, t.seq, NULL, 'Text', NULL, NULL, NULL,"
        " t.deleted_at, NULL, t.deleted_at FROM app.message_tombstones t WHERE t.id = ANY($1)"
    )
    queries = {**shipped_manifest().queries, "messages": messages}
    manifest = parse_manifest("".join(f"-- name: {n}\n{q};\n" for n, q in queries.items()), SOURCE)
    chat, sender = await new_chat(pool)
    sent = await send(pool, chat, sender, "secret")
    await make_stack(pool).dispatcher.run_pass()  # the message itself, delivered
    async with pool.acquire() as conn:
        await require_valid(conn, manifest, needs=())
        async with conn.transaction():
            await conn.execute("DELETE FROM messenger.messages WHERE id = $1", sent.message_id)
            entry = await conn.fetchval(
                "INSERT INTO messenger.realtime_outbox (kind, target_kind, chat_id, message_id,"
                " seq) VALUES ('MessageDeleted', 'ChatGroup', $1, $2, $3) RETURNING id",
                chat,
                sent.message_id,
                sent.seq,
            )
    stack = make_stack(pool, builder=default_payload_builder(manifest=manifest))
    assert (await stack.dispatcher.run_pass()).dispatched == 1
    (push,) = stack.publisher.pushes
    payload = orjson.loads(push.payload_json)
    assert push.target == "message_deleted"
    assert payload["eventId"] == str(entry)
    assert (payload["messageId"], payload["seq"]) == (str(sent.message_id), sent.seq)
    assert payload["deletedAt"].endswith("Z")
    assert "body" not in payload


async def test_json_columns_are_sent_as_json_without_a_check_first(
    pool: asyncpg.Pool, app: Manifest
) -> None:
    """The builder learns the json columns from the start's check; without one (this
    manifest was never checked) it prepares the query itself once."""
    block = (
        "-- kind: ReactionMeta\n-- target: chat\n-- event: reaction_meta\n"
        "SELECT r.id AS ref_id, r.meta AS unchecked_meta FROM app.reaction r WHERE r.id = ANY($1);"
    )
    manifest = with_kinds(block)
    async with pool.acquire() as conn:
        await register_kinds(conn, manifest)
    chat, _ = await new_chat(pool)
    ref = await reaction(pool, chat, meta='{"skin": 2}')
    await enqueue(pool, "ReactionMeta", chat=chat, ref=ref)
    stack = make_stack(pool, builder=default_payload_builder(manifest=manifest))
    assert (await stack.dispatcher.run_pass()).dispatched == 1
    (push,) = stack.publisher.pushes
    assert orjson.loads(push.payload_json)["uncheckedMeta"] == {"skin": 2}
