-- name: claim
-- Claim up to $1 due Pending rows in insertion (id) order, skipping rows another runner holds.
-- In the same statement: attempts += 1 and next_attempt_at = now() + backoff(attempts), with
-- backoff = min(cap $4, base $2 * factor $3 ^ (attempts - 1)) * (1 - $5 * random()), computed
-- in log space so that no attempt count overflows. Committing releases the row locks.
-- $6: ids this runner still has in flight (a pipelined pass claims the next batch before the
-- outcome of the current one is committed); usually empty.
-- The locked ids are collected into an array (an InitPlan run once) and the UPDATE finds them by
-- primary key: no join for the planner to get wrong (with a CTE join it may hash a sequential
-- scan of the whole table), and a cheaper plan to build on every call (custom plans). The outer
-- SELECT returns the rows in id order (UPDATE … RETURNING keeps no order).
WITH claimed AS (
    UPDATE messenger.realtime_outbox AS o
    SET attempts = o.attempts + 1,
        next_attempt_at = now() + make_interval(secs =>
            $2::float8 * exp(least(ln($4::float8 / $2::float8), o.attempts * ln($3::float8)))
            * (1 - $5::float8 * random())),
        updated_at = now(),
        row_version = o.row_version + 1
    WHERE o.id = ANY (ARRAY(
        SELECT id FROM messenger.realtime_outbox
        WHERE status = 'Pending' AND next_attempt_at <= now() AND id <> ALL ($6::uuid[])
        ORDER BY id
        LIMIT $1
        FOR UPDATE SKIP LOCKED
    ))
    RETURNING o.id, o.kind, o.target_kind, o.chat_id, o.target_user_id, o.message_id, o.ref_id,
              o.session_kind, o.seq, o.attempts, o.row_version, o.created_at
)
SELECT * FROM claimed ORDER BY id;

-- name: mark_done
-- Done for the rows whose row_version still matches ($1 ids, $2 versions); returns each row's
-- persist-to-push lag in seconds for the lag histogram.
UPDATE messenger.realtime_outbox AS o
SET status = 'Done', last_error = NULL, updated_at = now(), row_version = o.row_version + 1
FROM unnest($1::uuid[], $2::int[]) AS t(id, row_version)
WHERE o.id = t.id AND o.row_version = t.row_version AND o.status = 'Pending'
RETURNING o.id, extract(epoch FROM clock_timestamp() - o.created_at)::float8 AS lag;

-- name: mark_retry
-- Keep Pending (the backoff was set at claim); record why ($3 errors).
UPDATE messenger.realtime_outbox AS o
SET last_error = t.last_error, updated_at = now(), row_version = o.row_version + 1
FROM unnest($1::uuid[], $2::int[], $3::varchar[]) AS t(id, row_version, last_error)
WHERE o.id = t.id AND o.row_version = t.row_version AND o.status = 'Pending'
RETURNING o.id;

-- name: mark_quarantined
-- Quarantined with its reason; the claim never picks it again until requeued.
UPDATE messenger.realtime_outbox AS o
SET status = 'Quarantined', last_error = t.last_error, updated_at = now(),
    row_version = o.row_version + 1
FROM unnest($1::uuid[], $2::int[], $3::varchar[]) AS t(id, row_version, last_error)
WHERE o.id = t.id AND o.row_version = t.row_version AND o.status = 'Pending'
RETURNING o.id;

-- name: release
-- Give back claimed rows that were never pushed (graceful stop): the claim's attempt does not
-- count and the row is due again at once.
UPDATE messenger.realtime_outbox AS o
SET attempts = greatest(o.attempts - 1, 0), next_attempt_at = now(), updated_at = now(),
    row_version = o.row_version + 1
FROM unnest($1::uuid[], $2::int[]) AS t(id, row_version)
WHERE o.id = t.id AND o.row_version = t.row_version AND o.status = 'Pending'
RETURNING o.id;

-- name: requeue_ids
-- Operator: Quarantined -> Pending with attempts 0, due now.
UPDATE messenger.realtime_outbox
SET status = 'Pending', attempts = 0, next_attempt_at = now(), last_error = NULL,
    updated_at = now(), row_version = row_version + 1
WHERE status = 'Quarantined' AND id = ANY($1::uuid[]);

-- name: requeue_kind
UPDATE messenger.realtime_outbox
SET status = 'Pending', attempts = 0, next_attempt_at = now(), last_error = NULL,
    updated_at = now(), row_version = row_version + 1
WHERE status = 'Quarantined' AND kind = $1;

-- name: requeue_all
UPDATE messenger.realtime_outbox
SET status = 'Pending', attempts = 0, next_attempt_at = now(), last_error = NULL,
    updated_at = now(), row_version = row_version + 1
WHERE status = 'Quarantined';

-- name: purge_done
-- Retention: delete up to $2 Done rows created before the UUIDv7 floor $1 of the cutoff. The
-- id bound keeps the primary-key scan to old rows only.
DELETE FROM messenger.realtime_outbox
WHERE id IN (
    SELECT id FROM messenger.realtime_outbox
    WHERE id < $1 AND status = 'Done'
    ORDER BY id
    LIMIT $2
);

-- name: pending_count
SELECT count(*) FROM messenger.realtime_outbox WHERE status = 'Pending';

-- name: stats
SELECT
    count(*) FILTER (WHERE status = 'Pending') AS pending,
    count(*) FILTER (WHERE status = 'Quarantined') AS quarantined,
    count(*) FILTER (WHERE status = 'Done') AS done,
    coalesce(extract(epoch FROM now() - min(created_at) FILTER (WHERE status = 'Pending')), 0)::float8
        AS oldest_pending_age_seconds
FROM messenger.realtime_outbox;

-- name: quarantined_count
SELECT count(*) FROM messenger.realtime_outbox WHERE status = 'Quarantined';

-- name: try_lock
-- The single-runner lock, exactly this key (operators and tests may hold it to pause dispatch).
SELECT pg_try_advisory_lock(hashtextextended('job:scheduled:messenger-realtime-dispatch', 0));

-- name: unlock
SELECT pg_advisory_unlock(hashtextextended('job:scheduled:messenger-realtime-dispatch', 0));

-- name: set_busy
UPDATE messenger.realtime_dispatch_state SET idle = false, updated_at = now() WHERE idle;

-- name: set_idle
-- Run in a transaction with wait_writers: waits for writers that passed the trigger before the
-- flag flips, so the re-check claim that follows sees their rows.
UPDATE messenger.realtime_dispatch_state SET idle = true, updated_at = now() WHERE NOT idle;

-- name: wait_writers
SELECT pg_advisory_xact_lock(hashtextextended('realtime_outbox:wake', 0));
