"""The realtime outbox's schema, as realtime-dispatch prints it:

    REALTIME_KEY_TYPE=bigint realtime-dispatch migrate --only outbox --print-sql \
        > talk/sql/realtime_outbox.sql

(its key columns bigint, like this app's keys). The script records what it applied in
``messenger.realtime_schema_migrations``: after an upgrade of realtime-dispatch, either run
``realtime-dispatch migrate --only outbox`` (it applies only what is new), or print the new
script and add its new migrations in a new Django migration."""

from pathlib import Path

from django.db import migrations

SQL = (Path(__file__).resolve().parents[1] / "sql" / "realtime_outbox.sql").read_text()


class Migration(migrations.Migration):
    dependencies = [("talk", "0001_initial")]

    operations = [
        # One statement list of one script: psycopg runs it as it is (no splitting by Django).
        migrations.RunSQL([SQL], reverse_sql=["DROP SCHEMA messenger CASCADE"]),
    ]
