"""The first tables: jobs, trial results, configs, kernel sources, lookup misses.

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("key_slug", sa.String(255), nullable=False),
        sa.Column("key_json", sa.JSON(), nullable=False),
        sa.Column("kernel", sa.String(32), nullable=False),
        sa.Column("arch", sa.String(32), nullable=False),
        sa.Column("buckets", sa.JSON(), nullable=True),
        sa.Column("trials", sa.Integer(), nullable=False),
        sa.Column("time_budget_s", sa.Float(), nullable=True),
        sa.Column("search", sa.String(32), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("max_attempts", sa.Integer(), nullable=False),
        sa.Column("expired_leases", sa.Integer(), nullable=False),
        sa.Column("lease_owner", sa.String(255), nullable=True),
        sa.Column("lease_expires_at", TS, nullable=True),
        sa.Column("heartbeat_at", TS, nullable=True),
        sa.Column("progress", sa.JSON(), nullable=True),
        sa.Column("best", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("submitted_by", sa.String(255), nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("updated_at", TS, nullable=False),
        sa.Column("started_at", TS, nullable=True),
        sa.Column("finished_at", TS, nullable=True),
        sa.CheckConstraint(
            "status IN ('queued', 'running', 'succeeded', 'failed', 'cancelled')", name="ck_jobs_status"
        ),
    )
    op.create_index("ix_jobs_claim", "jobs", ["status", "arch", "id"])
    op.create_index("ix_jobs_key_slug", "jobs", ["key_slug"])

    op.create_table(
        "trial_results",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="CASCADE"), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("number", sa.Integer(), nullable=False),
        sa.Column("bucket", sa.String(64), nullable=False),
        sa.Column("bucket_json", sa.JSON(), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("time_us", sa.Float(), nullable=True),
        sa.Column("timing", sa.String(64), nullable=False),
        sa.Column("compile_stats", sa.JSON(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("source_hash", sa.String(64), nullable=False),
        sa.Column("worker", sa.String(255), nullable=True),
        sa.Column("created_at", TS, nullable=False),
    )
    op.create_index("ix_trial_results_job", "trial_results", ["job_id", "attempt"])

    op.create_table(
        "configs",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("key_slug", sa.String(255), nullable=False),
        sa.Column("key_json", sa.JSON(), nullable=False),
        sa.Column("kernel", sa.String(32), nullable=False),
        sa.Column("arch", sa.String(32), nullable=False),
        sa.Column("heads", sa.Integer(), nullable=False),
        sa.Column("topk", sa.Integer(), nullable=False),
        sa.Column("window", sa.Integer(), nullable=False),
        sa.Column("bucket", sa.String(64), nullable=False),
        sa.Column("bucket_json", sa.JSON(), nullable=False),
        sa.Column("params", sa.JSON(), nullable=False),
        sa.Column("source_hash", sa.String(64), nullable=False),
        sa.Column("time_us", sa.Float(), nullable=True),
        sa.Column("default_params", sa.JSON(), nullable=True),
        sa.Column("default_time_us", sa.Float(), nullable=True),
        sa.Column("timing", sa.String(64), nullable=False),
        sa.Column("trials_run", sa.Integer(), nullable=False),
        sa.Column("trials_failed", sa.JSON(), nullable=True),
        sa.Column("triton_version", sa.String(64), nullable=False),
        sa.Column("torch_version", sa.String(64), nullable=False),
        sa.Column("device_name", sa.String(255), nullable=False),
        sa.Column("job_id", sa.Integer(), sa.ForeignKey("jobs.id", ondelete="SET NULL"), nullable=True),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )
    # Exactly one active config per key and bucket; superseded rows stay as history.
    op.create_index(
        "uq_configs_active",
        "configs",
        ["key_slug", "bucket"],
        unique=True,
        postgresql_where=sa.text("active"),
        sqlite_where=sa.text("active"),
    )
    op.create_index("ix_configs_lookup", "configs", ["arch", "heads", "topk", "window"])

    op.create_table(
        "kernel_sources",
        sa.Column("source_hash", sa.String(64), primary_key=True),
        sa.Column("template", sa.String(128), nullable=False),
        sa.Column("source", sa.Text(), nullable=False),
        sa.Column("created_at", TS, nullable=False),
    )

    op.create_table(
        "lookup_misses",
        sa.Column("key_slug", sa.String(255), primary_key=True),
        sa.Column("key_json", sa.JSON(), nullable=False),
        sa.Column("kernel", sa.String(32), nullable=False),
        sa.Column("arch", sa.String(32), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("first_seen", TS, nullable=False),
        sa.Column("last_seen", TS, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("lookup_misses")
    op.drop_table("kernel_sources")
    op.drop_index("ix_configs_lookup", table_name="configs")
    op.drop_index("uq_configs_active", table_name="configs")
    op.drop_table("configs")
    op.drop_index("ix_trial_results_job", table_name="trial_results")
    op.drop_table("trial_results")
    op.drop_index("ix_jobs_key_slug", table_name="jobs")
    op.drop_index("ix_jobs_claim", table_name="jobs")
    op.drop_table("jobs")
