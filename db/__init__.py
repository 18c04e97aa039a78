"""The service's database: models, migrations, sessions, the job queue, configs and bundles."""
