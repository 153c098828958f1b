"""``migrate --print-sql``: the selected migrations as one script, each followed by its record."""

from realtime_dispatch.messenger.schema import selected_migrations
from realtime_dispatch.outbox.migrate import BOOKKEEPING_SQL, migration_script


def test_the_outbox_alone_has_no_table_of_the_reference_messenger() -> None:
    outbox = selected_migrations(with_messenger=False)
    script = migration_script(outbox)
    assert script.startswith(f"-- realtime-dispatch schema: {len(outbox)} migrations\n\n")
    assert BOOKKEEPING_SQL in script
    for m in outbox:
        assert f"VALUES ({m.version}, '{m.name}');" in script
    assert "messenger.chats" not in script
    assert "messenger.realtime_new_id()" in script  # the id default (0014)
    everything = migration_script(selected_migrations(with_messenger=True))
    assert "CREATE TABLE messenger.chats" in everything
    versions = [m.version for m in selected_migrations(with_messenger=True)]
    assert versions == sorted(versions)
    positions = [everything.index(f"-- migration {v:04d}_") for v in versions]
    assert positions == sorted(positions)
