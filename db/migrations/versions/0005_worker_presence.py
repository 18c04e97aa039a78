"""Workers announce themselves: `worker_presence` (one row a live worker process, refreshed every few
seconds), so a job for an arch no live worker serves is answered with a warning.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "worker_presence",
        sa.Column("owner", sa.String(255), primary_key=True),
        sa.Column("arch", sa.String(32), nullable=False),
        sa.Column("gpu", sa.Integer(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_worker_presence_arch", "worker_presence", ["arch"])


def downgrade() -> None:
    op.drop_index("ix_worker_presence_arch", table_name="worker_presence")
    op.drop_table("worker_presence")
