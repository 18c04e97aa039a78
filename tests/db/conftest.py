from tests.db.fixtures import db, db_url, pg_database, pg_url  # noqa: F401  (fixtures)
