-- Named queries of GET /api/sync (loaded by realtime_dispatch.sync.store).

-- name: source
-- What names this database of this cluster in a cursor.
SELECT (SELECT system_identifier FROM pg_control_system()) AS system_identifier,
       (SELECT oid FROM pg_database WHERE datname = current_database()) AS database_oid

-- name: horizon
-- The snapshot's xmin: every transaction below it has ended.
SELECT pg_snapshot_xmin(pg_current_snapshot()) AS horizon

-- name: page
-- One page of the caller's events after the cursor, in (xid, id) order; one statement whatever
-- the number of chats: an index range scan of ix_rto_sync, each row's chat checked against the
-- caller's participant row (its unique key). The first output row always exists and carries
-- the horizon and whether the cursor is past what is retained. Only rows below the horizon are
-- served; one row more than asked for tells whether a visible row waits above it (held back).
--   $1 caller, $2 cursor xid, $3 cursor id, $4 page size + 1
WITH h AS (
    SELECT pg_snapshot_xmin(pg_current_snapshot()) AS horizon,
           pg_snapshot_xmax(pg_current_snapshot()) AS xmax,
           (SELECT deleted_through FROM messenger.realtime_sync_floor) AS floor
), state AS (
    SELECT horizon, (floor IS NOT NULL AND floor >= $2::xid8) OR $2::xid8 > xmax AS limited
    FROM h
)
SELECT state.horizon, state.limited, r.*
FROM state
LEFT JOIN LATERAL (
    SELECT o.xid, o.id, o.kind, o.target_kind, o.chat_id, o.target_user_id,
           o.message_id, o.ref_id, o.session_kind, o.seq, o.attempts, o.row_version, o.created_at
    FROM messenger.realtime_outbox o
    LEFT JOIN messenger.participants p
        ON p.chat_id = o.chat_id AND p.user_id = $1::uuid AND p.active
    WHERE NOT state.limited
      AND (o.xid, o.id) > ($2::xid8, $3::uuid)
      AND ((o.target_kind = 'User' AND o.target_user_id = $1::uuid)
           OR (o.target_kind = 'ChatGroup' AND p.joined_at <= o.created_at))
    ORDER BY o.xid, o.id
    LIMIT $4
) r ON true
