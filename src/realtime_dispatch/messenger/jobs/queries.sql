-- Named SQL of the media lifecycle jobs (parsed by realtime_dispatch.outbox.queries).

-- name: try_lock
-- A job's single-runner lock (a session advisory lock on the job's own connection): $1 is the
-- job's key, e.g. 'job:scheduled:messenger-conference-room-reaper'.
SELECT pg_try_advisory_lock(hashtextextended($1::text, 0));

-- name: unlock
SELECT pg_advisory_unlock(hashtextextended($1::text, 0));

-- name: lock_stale_conferences
-- Up to $3 live conferences that are empty for $1 seconds (nobody Joined, the last one left
-- that long ago, or nobody ever came after the start) or older than $2 seconds, oldest first,
-- locked; rows another runner (or a join / leave / end in flight) holds are skipped. The
-- caller re-checks them under the lock with end_stale_conferences.
SELECT c.id
FROM messenger.conference_sessions AS c
WHERE c.status = 'Active'
  AND (c.started_at <= now() - make_interval(secs => $2::float8)
       OR (NOT EXISTS (SELECT 1 FROM messenger.conference_participants AS p
                       WHERE p.conference_id = c.id AND p.status = 'Joined')
           AND coalesce((SELECT max(p.left_at) FROM messenger.conference_participants AS p
                         WHERE p.conference_id = c.id), c.started_at)
               <= now() - make_interval(secs => $1::float8)))
ORDER BY c.started_at
LIMIT $3
FOR UPDATE OF c SKIP LOCKED;

-- name: end_stale_conferences
-- End the locked conferences ($3 ids) that are still stale ($1, $2 as above) by now: a separate
-- statement sees what committed while the lock was taken (a rejoin that just got in stays).
-- Nobody ended them: ended_by_user_id NULL. ``overlong``: ended for its age, not for being empty.
UPDATE messenger.conference_sessions AS c
SET status = 'Ended', ended_at = now(), ended_by_user_id = NULL
WHERE c.id = ANY ($3::uuid[])
  AND c.status = 'Active'
  AND (c.started_at <= now() - make_interval(secs => $2::float8)
       OR (NOT EXISTS (SELECT 1 FROM messenger.conference_participants AS p
                       WHERE p.conference_id = c.id AND p.status = 'Joined')
           AND coalesce((SELECT max(p.left_at) FROM messenger.conference_participants AS p
                         WHERE p.conference_id = c.id), c.started_at)
               <= now() - make_interval(secs => $1::float8)))
RETURNING c.id, c.chat_id, c.started_at <= now() - make_interval(secs => $2::float8) AS overlong;

-- name: claim_finalize
-- Claim up to $1 Stopped recordings whose next ask is due (never asked: due from the stop), in
-- due order, skipping rows another runner holds; in the same statement finalize_attempts += 1
-- and finalize_next_at = now() + backoff(attempts), the dispatcher's formula (base $2, factor
-- $3, cap $4, jitter $5; see outbox/queries.sql, claim). Committing releases the locks: a
-- crash before the outcome means another ask after the backoff.
UPDATE messenger.call_recordings AS r
SET finalize_attempts = r.finalize_attempts + 1,
    finalize_next_at = now() + make_interval(secs =>
        $2::float8 * exp(least(ln($4::float8 / $2::float8), r.finalize_attempts * ln($3::float8)))
        * (1 - $5::float8 * random()))
WHERE r.id = ANY (ARRAY(
    SELECT id FROM messenger.call_recordings
    WHERE status = 'Stopped' AND coalesce(finalize_next_at, stopped_at) <= now()
    ORDER BY coalesce(finalize_next_at, stopped_at)
    LIMIT $1
    FOR UPDATE SKIP LOCKED
))
RETURNING r.id, r.finalize_attempts;

-- name: lock_timed_out_recordings
-- Without a status service: up to $2 Stopped recordings stopped more than $1 seconds ago,
-- locked (skipping rows a callback or another runner holds).
SELECT id FROM messenger.call_recordings
WHERE status = 'Stopped' AND stopped_at <= now() - make_interval(secs => $1::float8)
ORDER BY stopped_at
LIMIT $2
FOR UPDATE SKIP LOCKED;

-- name: finalize_available
-- Available, for the recordings ($1 ids) still Stopped: a callback that got there first wins,
-- and its row is left as it made it.
UPDATE messenger.call_recordings AS r
SET status = 'Available', available_at = now()
WHERE r.id = ANY ($1::uuid[]) AND r.status = 'Stopped'
RETURNING r.id;

-- name: finalize_failed
-- Failed with a code ($1 ids, $2 codes), for the recordings still Stopped (as above).
UPDATE messenger.call_recordings AS r
SET status = 'Failed', failed_at = now(), failure_code = t.code
FROM unnest($1::uuid[], $2::text[]) AS t(id, code)
WHERE r.id = t.id AND r.status = 'Stopped'
RETURNING r.id;

-- name: recording_sessions
-- Who hears about each recording ($1 ids): a call's two parties, or a conference's chat.
SELECT r.id, r.session_kind, r.call_id, r.conference_id,
       cs.caller_user_id, cs.callee_user_id, cf.chat_id
FROM messenger.call_recordings AS r
LEFT JOIN messenger.call_sessions AS cs ON cs.id = r.call_id
LEFT JOIN messenger.conference_sessions AS cf ON cf.id = r.conference_id
WHERE r.id = ANY ($1::uuid[]);
