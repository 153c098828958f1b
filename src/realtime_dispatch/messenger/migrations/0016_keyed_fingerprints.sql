-- Idempotency fingerprints are keyed now (an HMAC under a server secret, computed by the
-- service) and blanked when their message is deleted. Rows written before: a deleted message's
-- plain sha256 of its content is blanked here; a live message's stays until it is deleted (its
-- content is in messenger.messages anyway), and a retry of such a send answers 409 instead of
-- repeating it.
UPDATE messenger.message_client_ids AS d SET fingerprint = '\x'::bytea
FROM messenger.messages AS m
WHERE m.id = d.message_id AND m.deleted_at IS NOT NULL AND d.fingerprint <> '\x'::bytea;
