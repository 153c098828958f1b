-- name: quarantined
-- Quarantined rows, newest first, optionally of one kind ($1 NULL = all), at most $2.
SELECT id, kind, target_kind, chat_id, target_user_id, session_kind, attempts, last_error,
       created_at, updated_at
FROM messenger.realtime_outbox
WHERE status = 'Quarantined' AND ($1::varchar IS NULL OR kind = $1)
ORDER BY id DESC
LIMIT $2;

-- name: quarantined_by_kind
SELECT kind, count(*) AS rows
FROM messenger.realtime_outbox
WHERE status = 'Quarantined'
GROUP BY kind
ORDER BY rows DESC, kind;

-- name: lock_holder
-- Who holds the dispatcher's single-runner advisory lock (a bigint key: classid = high 32 bits,
-- objid = low 32 bits, objsubid = 1).
SELECT a.pid, a.application_name, host(a.client_addr) AS client_addr, a.backend_start,
       a.state, a.state_change
FROM pg_locks AS l
JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND ((l.classid::bigint << 32) | l.objid::bigint)
      = hashtextextended('job:scheduled:messenger-realtime-dispatch', 0);

-- name: recent_lag
-- Persist-to-push lag of rows created since the UUIDv7 floor $1 and already Done (updated_at is
-- when the push was recorded); a primary-key range scan over recent rows only.
SELECT count(*) AS done,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM updated_at - created_at))
           AS p50,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM updated_at - created_at))
           AS p95
FROM messenger.realtime_outbox
WHERE id >= $1 AND status = 'Done';
