-- Partitioned dispatch (REALTIME_DISPATCH_PARTITIONS): a row's partition, and one idle flag per
-- partition, so that owners notify while any partition's runner sleeps (the trigger already
-- notifies when any flag is set). Partition 0 of 1 keeps the former single flag.

-- hash(chat, else target user) mod N; IMMUTABLE and plain SQL, so the planner inlines it.
CREATE FUNCTION messenger.realtime_partition(chat_id @key_type@, target_user_id @key_type@,
                                               partitions int)
RETURNS int LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ((hashtextextended(coalesce(chat_id, target_user_id)::text, 0) % partitions
             + partitions) % partitions)::int
$$;

ALTER TABLE messenger.realtime_dispatch_state
    ADD COLUMN partitions int NOT NULL DEFAULT 1,
    ADD COLUMN partition_index int NOT NULL DEFAULT 0;
ALTER TABLE messenger.realtime_dispatch_state DROP CONSTRAINT realtime_dispatch_state_pkey;
ALTER TABLE messenger.realtime_dispatch_state DROP COLUMN singleton;
ALTER TABLE messenger.realtime_dispatch_state
    ADD PRIMARY KEY (partitions, partition_index),
    ADD CONSTRAINT ck_realtime_dispatch_state_partition
        CHECK (partitions >= 1 AND partition_index >= 0 AND partition_index < partitions);
