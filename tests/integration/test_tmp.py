async def test_migrated(pool):
    assert await pool.fetchval("select count(*) from messenger.realtime_schema_migrations") == 2
