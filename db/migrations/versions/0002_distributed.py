"""Distributed jobs: a job several workers of one arch run together, sharing its Optuna studies.

`jobs.distributed` / `jobs.max_workers`, and `job_participants`: one row per worker per attempt of a
distributed job, with that worker's own lease.

Revision ID: 0002
Revises: 0001
Create Date: 2025-02-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    # batch_alter_table: SQLite cannot add a column with a constraint in place (env.py renders batch
    # mode there); on PostgreSQL it is a plain ALTER TABLE. The server default fills existing rows.
    with op.batch_alter_table("jobs") as b:
        b.add_column(sa.Column("distributed", sa.Boolean(), nullable=False, server_default=sa.text("false")))
        b.add_column(sa.Column("max_workers", sa.Integer(), nullable=True))

    op.create_table(
        "job_participants",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("slot", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("busy_bucket", sa.String(64), nullable=True),
        sa.Column("trials_done", sa.Integer(), nullable=False),
        sa.Column("lease_expires_at", TS, nullable=True),
        sa.Column("heartbeat_at", TS, nullable=True),
        sa.Column("joined_at", TS, nullable=False),
        sa.Column("finished_at", TS, nullable=True),
        sa.CheckConstraint(
            "status IN ('active', 'publishing', 'done', 'published', 'left', 'lost')",
            name="ck_job_participants_status",
        ),
    )
    op.create_index("uq_job_participants_owner", "job_participants", ["job_id", "attempt", "owner"], unique=True)
    op.create_index("uq_job_participants_slot", "job_participants", ["job_id", "attempt", "slot"], unique=True)


def downgrade() -> None:
    op.drop_index("uq_job_participants_slot", table_name="job_participants")
    op.drop_index("uq_job_participants_owner", table_name="job_participants")
    op.drop_table("job_participants")
    with op.batch_alter_table("jobs") as b:
        b.drop_column("max_workers")
        b.drop_column("distributed")
