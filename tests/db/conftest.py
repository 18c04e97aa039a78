from tests.db.fixtures import db, db_url, pg_database  # noqa: F401  (fixtures)
