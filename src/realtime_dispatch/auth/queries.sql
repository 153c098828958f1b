-- name: revoke
-- Revoke a user's tokens issued before now (again: the revocation moves to now). The table's
-- trigger notifies every hub.
INSERT INTO messenger.realtime_revocations (user_id) VALUES ($1)
ON CONFLICT (user_id) DO UPDATE SET revoked_at = clock_timestamp()
RETURNING user_id, revoked_at;

-- name: lift
-- Lift a user's revocation; returns the row if there was one.
DELETE FROM messenger.realtime_revocations WHERE user_id = $1
RETURNING user_id, revoked_at;

-- name: revocations
-- Every revocation in force, newest first.
SELECT user_id, revoked_at FROM messenger.realtime_revocations ORDER BY revoked_at DESC, user_id;
