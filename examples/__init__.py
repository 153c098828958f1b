"""Owner-service examples: a domain change and its push intent in one transaction, with asyncpg,
psycopg and SQLAlchemy. ``tests/integration/test_owner_examples.py`` runs each of them."""
