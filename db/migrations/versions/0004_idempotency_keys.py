"""Idempotent job submission: `jobs.idempotency_key` (the client's `Idempotency-Key` header, unique
where set) and `jobs.request_hash` (the submitted request's digest, so a retry with the same key and
a different body is told apart from a true retry).

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as b:
        b.add_column(sa.Column("idempotency_key", sa.String(255), nullable=True))
        b.add_column(sa.Column("request_hash", sa.String(64), nullable=True))
    # Unique where set: jobs submitted without a key (NULL) never collide, on SQLite or PostgreSQL.
    op.create_index("uq_jobs_idempotency_key", "jobs", ["idempotency_key"], unique=True)


def downgrade() -> None:
    op.drop_index("uq_jobs_idempotency_key", table_name="jobs")
    with op.batch_alter_table("jobs") as b:
        b.drop_column("request_hash")
        b.drop_column("idempotency_key")
