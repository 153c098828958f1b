-- A UUIDv7 made by the server at the moment it is called (RFC 9562: 48-bit Unix milliseconds,
-- version 7, then the sub-millisecond fraction in the 12 bits of rand_a for finer ordering,
-- then the variant and 62 random bits).
--
-- The dispatcher claims in id order, which must follow commit order within a chat. An id made
-- by the client before its statement waits for the chat row lock can sort before the id of the
-- sender who held that lock; an id made here, after the lock is granted, cannot.
-- (PL/pgSQL, not SQL: the clock is read once, and the call costs half as much.)
CREATE FUNCTION messenger.realtime_new_id() RETURNS uuid
LANGUAGE plpgsql VOLATILE PARALLEL SAFE AS $$
DECLARE
    us bigint := floor(extract(epoch FROM clock_timestamp()) * 1000000);
BEGIN
    RETURN encode(
        substring(int8send(us / 1000) FROM 3)
        || int2send((28672 + (us % 1000) * 4096 / 1000)::int2)
        || substring(uuid_send(gen_random_uuid()) FROM 9),
        'hex')::uuid;
END
$$;
