-- name: claim
-- Claim up to $1 due Pending rows in insertion (id) order, skipping rows another runner holds.
-- In the same statement: attempts += 1 and next_attempt_at = now() + backoff(attempts), with
-- backoff = min(cap $4, base $2 * factor $3 ^ (attempts - 1)) * (1 - $5 * random()), computed
-- in log space so that no attempt count overflows. Committing releases the row locks.
-- $6: ids this runner still has in flight (a pipelined pass claims the next batch before the
-- outcome of the current one is committed); usually empty.
-- $7, $8: the partition count and this runner's partition (1 and 0: the whole outbox). The
-- partition filter rides on ix_rto_pending_id: each partition's claim walks past the Pending
-- rows of the others (N-1 of every N), which stays cheap for a few partitions.
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
          AND ($7::int = 1 OR messenger.realtime_partition(chat_id, target_user_id, $7) = $8)
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

-- name: mark_with_error
-- The outcomes that carry their reason ($3 errors), by $4 the status they take: Pending (a
-- retry: the backoff was set at claim), Quarantined (the claim never picks it again until
-- requeued) or Done (the target is gone, done without a push: no lag is observed for these).
UPDATE messenger.realtime_outbox AS o
SET status = $4::varchar, last_error = t.last_error, updated_at = now(),
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

-- name: dead_tuples
-- Live and dead row versions as the statistics see them (kept with autovacuum off too).
SELECT coalesce(n_live_tup, 0) AS live, coalesce(n_dead_tup, 0) AS dead
FROM pg_stat_user_tables WHERE relid = 'messenger.realtime_outbox'::regclass;

-- name: vacuum
-- Plain VACUUM: takes no lock that blocks reads or writes; makes the purged space reusable.
VACUUM messenger.realtime_outbox;

-- name: pending_count
SELECT count(*) FROM messenger.realtime_outbox WHERE status = 'Pending';

-- name: stats
-- done: delivered (or nobody to deliver to); target_gone: Done without a push, the chat deleted.
SELECT
    count(*) FILTER (WHERE status = 'Pending') AS pending,
    count(*) FILTER (WHERE status = 'Quarantined') AS quarantined,
    count(*) FILTER (WHERE status = 'Done' AND last_error LIKE 'TargetGone:%') AS target_gone,
    count(*) FILTER (WHERE status = 'Done') AS done_all,
    coalesce(extract(epoch FROM now() - min(created_at) FILTER (WHERE status = 'Pending')), 0)::float8
        AS oldest_pending_age_seconds
FROM messenger.realtime_outbox;

-- name: quarantined_count
SELECT count(*) FROM messenger.realtime_outbox WHERE status = 'Quarantined';

-- name: try_lock
-- A partition's lock: hashtextextended($1, 0) with $1 = Partition.lock_name. With one partition
-- that is exactly the spec's key, 'job:scheduled:messenger-realtime-dispatch' (operators and
-- tests may hold it to pause dispatch).
SELECT pg_try_advisory_lock(hashtextextended($1::text, 0));

-- name: unlock
SELECT pg_advisory_unlock(hashtextextended($1::text, 0));

-- name: set_busy
-- $1, $2: partition count and index.
UPDATE messenger.realtime_dispatch_state SET idle = false, updated_at = now()
WHERE idle AND partitions = $1 AND partition_index = $2;

-- name: set_idle
-- Run in a transaction with wait_writers: waits for writers that passed the trigger before the
-- flag flips, so the re-check claim that follows sees their rows.
INSERT INTO messenger.realtime_dispatch_state (partitions, partition_index, idle)
VALUES ($1, $2, true)
ON CONFLICT (partitions, partition_index) DO UPDATE SET idle = true, updated_at = now()
WHERE NOT messenger.realtime_dispatch_state.idle;

-- name: forget_other_partitionings
-- At start: the flags of another partition count are nobody's now (a sleeping flag left behind
-- would make every owner notify).
DELETE FROM messenger.realtime_dispatch_state WHERE partitions <> $1;

-- name: due_exists
-- After setting the idle flag: is anything of this partition ($1 count, $2 index) due after all?
SELECT EXISTS (
    SELECT 1 FROM messenger.realtime_outbox
    WHERE status = 'Pending' AND next_attempt_at <= now()
      AND ($1::int = 1 OR messenger.realtime_partition(chat_id, target_user_id, $1) = $2)
);

-- name: wait_writers
SELECT pg_advisory_xact_lock(hashtextextended('realtime_outbox:wake', 0));
