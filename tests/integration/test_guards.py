"""Two guards of the outbox statements that nothing else would miss: the ``row_version`` check in
every outcome statement (a runner whose rows were taken over writes nothing over the new owner's
claim) and the jitter in the claim's backoff (rows that failed together do not come back as one
burst)."""

from collections.abc import Sequence

import asyncpg

from realtime_dispatch.outbox.backoff import JITTER, Backoff
from realtime_dispatch.outbox.model import ClaimedRow
from realtime_dispatch.outbox.queries import QUERIES
from realtime_dispatch.outbox.store import OutboxStore, Outcomes
from tests.integration.support import new_chat, send

FILL_SQL = """
INSERT INTO messenger.realtime_outbox (kind, target_kind, target_user_id, ref_id)
SELECT 'ContactRemoved', 'User', gen_random_uuid(), gen_random_uuid()
FROM generate_series(1, $1)
"""


def one_of_each(rows: Sequence[ClaimedRow], error: str) -> Outcomes:
    """Four claimed rows' outcomes: the first done, then a retry, a quarantine and a gone."""
    a, b, c, d = rows
    return Outcomes(
        done=[(a.id, a.row_version)],
        retry=[(b.id, b.row_version, error)],
        quarantine=[(c.id, c.row_version, error)],
        gone=[(d.id, d.row_version, error)],
    )


async def test_no_outcome_is_written_over_a_newer_claim(pool: asyncpg.Pool) -> None:
    """A runner claims four rows, loses them (its lease expired: they were released and claimed
    again by another runner), and only then writes Done, retry, quarantine and gone for them.
    Every one of those statements must find the row_version moved and leave the row alone."""
    chat, sender = await new_chat(pool)
    for i in range(4):
        await send(pool, chat, sender, f"m{i}")
    store = OutboxStore(pool, Backoff(base=60.0, cap=60.0))
    stale = await store.claim(10)
    assert len(stale) == 4
    assert await store.release(stale) == 4
    fresh = await store.claim(10)
    assert {r.id for r in fresh} == {r.id for r in stale}
    before = {
        r["id"]: dict(r)
        for r in await pool.fetch(
            "SELECT id, status, attempts, row_version, last_error FROM messenger.realtime_outbox"
        )
    }
    written = await store.write_outcomes(one_of_each(stale, "stale"))
    assert (list(written.done_lags), written.done, written.retried) == ([], set(), set())
    assert (written.quarantined, written.gone) == (set(), set())
    after = {
        r["id"]: dict(r)
        for r in await pool.fetch(
            "SELECT id, status, attempts, row_version, last_error FROM messenger.realtime_outbox"
        )
    }
    assert after == before
    # The new owner's outcomes do land.
    e, f, g, h = fresh
    written = await store.write_outcomes(one_of_each(fresh, "x"))
    assert (len(written.done_lags), written.done, written.retried) == (1, {e.id}, {f.id})
    assert (written.quarantined, written.gone) == ({g.id}, {h.id})


async def test_rows_claimed_together_get_spread_retry_times(pool: asyncpg.Pool) -> None:
    """Forty rows claimed in one statement, with the same attempt count, share ``now()``: only
    the claim's ``random()`` makes their next attempts differ, within the jitter's bounds."""
    await pool.execute(FILL_SQL, 40)
    base = 10.0
    async with pool.acquire() as conn, conn.transaction():
        claimed = await conn.fetch(QUERIES["claim"], 100, base, 2.0, 120.0, JITTER, [], 1, 0)
        delays = [
            float(v)
            for v in await conn.fetchval(
                "SELECT array_agg(extract(epoch FROM next_attempt_at - now()))"
                " FROM messenger.realtime_outbox"
            )
        ]
    assert len(claimed) == 40
    assert all(base * (1 - JITTER) - 1e-6 <= d <= base + 1e-6 for d in delays), delays
    # Forty draws from a continuous spread: the chance of fewer than 30 distinct values is nil.
    assert len({round(d, 6) for d in delays}) >= 30, delays
    assert max(delays) - min(delays) > base * JITTER / 4
