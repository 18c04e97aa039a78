"""Warmup keys per published config.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "config_warmup_keys",
        sa.Column("config_id", sa.Integer(), sa.ForeignKey("configs.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("target", sa.String(32), nullable=False),
        sa.Column("triton_version", sa.String(64), nullable=False),
        sa.Column("keys", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("config_warmup_keys")
