-- Named queries of GET /api/sync (loaded by realtime_dispatch.sync.store).

-- name: source
-- What names this database of this cluster in a cursor.
SELECT (SELECT system_identifier FROM pg_control_system()) AS system_identifier,
       (SELECT oid FROM pg_database WHERE datname = current_database()) AS database_oid

-- name: horizon
-- The snapshot's xmin (every transaction below it has ended) and the retention floor.
SELECT pg_snapshot_xmin(pg_current_snapshot()) AS horizon,
       (SELECT deleted_through FROM messenger.realtime_sync_floor) AS floor

-- name: page
-- One page of the caller's events after the cursor, in (xid, id) order; one statement whatever
-- the number of chats or of rows that are not the caller's: an index range scan of ix_rto_sync
-- from the cursor that stops after $5 rows (the scan bound), each row checked against the
-- caller's membership (`:membership`: on the reference messenger a hash lookup of the
-- caller's chats per row, read once per statement, and one probe of an index on (chat, user)
-- for the rows of those chats only; on an adopter's, one probe per row), read
-- lazily: a page that fills up early stops there. The first output row always exists and
-- carries the horizon, the retention floor and whether the cursor is past what is retained.
-- Only rows below the horizon are served; one row more than asked for tells whether a visible
-- row waits above it (held back). A short page asks `edge` whether the scan stopped at its
-- bound. A template: `:membership` takes `membership` (the reference messenger's
-- participants) or `membership_spans` (an adopter's `member_spans`); realtime_dispatch.sync.store
-- composes them into QUERIES["page"] and QUERIES["page_spans"]. $1 takes the type of
-- target_user_id (uuid in the reference schema, the owner's key type on an adopter's).
--   $1 caller, $2 cursor xid, $3 cursor id, $4 page size + 1, $5 scan bound
WITH h AS (
    SELECT pg_snapshot_xmin(pg_current_snapshot()) AS horizon,
           pg_snapshot_xmax(pg_current_snapshot()) AS xmax,
           (SELECT deleted_through FROM messenger.realtime_sync_floor) AS floor
), state AS (
    SELECT horizon, floor,
           (floor IS NOT NULL AND floor >= $2::xid8) OR $2::xid8 > xmax AS limited
    FROM h
)
SELECT state.horizon, state.floor, state.limited, r.*
FROM state
LEFT JOIN LATERAL (
    SELECT s.*
    FROM (
        SELECT o.xid, o.id, o.kind, o.target_kind, o.chat_id, o.target_user_id, o.message_id,
               o.ref_id, o.session_kind, o.seq, o.attempts, o.row_version, o.created_at
        FROM messenger.realtime_outbox o
        WHERE NOT state.limited AND (o.xid, o.id) > ($2::xid8, $3::uuid)
        ORDER BY o.xid, o.id
        LIMIT $5
    ) s
    WHERE (s.target_kind = 'User' AND s.target_user_id = $1)
       OR (s.target_kind = 'ChatGroup' AND :membership)
    ORDER BY s.xid, s.id
    LIMIT $4
) r ON true

-- name: membership
-- `page`'s slot on the reference messenger: the chat row (s) is the caller's when the caller
-- is an active participant who joined before it was written. The caller's active chats are
-- read once per statement (ix_participants_user_active) into a hashed subplan: a row of
-- another chat, which in a resume is nearly every row examined, costs a hash lookup; only the
-- caller's own rows take the probe of the unique key that checks joined_at. In a reconnect
-- storm's shape (a cursor 440 rows behind; the caller in 5 of 2,500 chats) the statement
-- went from 0.83 ms and 900 buffer hits to 0.19 ms and 27 (EXPLAIN ANALYZE, 2026-12-06).
s.chat_id IN (
    SELECT mine.chat_id FROM messenger.participants mine
    WHERE mine.user_id = $1::uuid AND mine.active)
AND EXISTS (
    SELECT 1 FROM messenger.participants p
    WHERE p.chat_id = s.chat_id AND p.user_id = $1::uuid AND p.active
      AND p.joined_at <= s.created_at)

-- name: membership_spans
-- `page`'s slot on an adopter's schema, with the caller's chats read from the manifest's
-- `member_spans` (its text takes the place of `:member_spans`, as a subquery; its $1 is the
-- caller, as here). A chat row is the caller's when it was written within one of the caller's
-- spans: joined_at <= created_at < left_at (left_at null: still a member). A plain
-- member_spans query is flattened into the per-row EXISTS, so each row examined costs one
-- probe of the adopter's membership index on (chat, user), as on the reference messenger.
EXISTS (
    SELECT 1 FROM :member_spans AS m
    WHERE m.chat_id = s.chat_id AND m.joined_at <= s.created_at
      AND (m.left_at IS NULL OR s.created_at < m.left_at))

-- name: edge
-- The position of the $3-th row after the cursor (none: fewer rows than that), by the index
-- alone: where a page that examined $3 rows stopped. Rows below a page's horizon never change,
-- so a later snapshot answers for them too.
--   $1 cursor xid, $2 cursor id, $3 scan bound
SELECT o.xid, o.id
FROM messenger.realtime_outbox o
WHERE (o.xid, o.id) > ($1::xid8, $2::uuid)
ORDER BY o.xid, o.id
OFFSET $3 - 1
LIMIT 1
