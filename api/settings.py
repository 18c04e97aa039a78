"""Every setting of the service (API and workers), from the environment with the KVTUNE_ prefix.

Built where it is used (the app factory, the worker's entry point), never at import, so tests and
tools can construct their own.
"""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="KVTUNE_", extra="ignore")

    database_url: str = Field("sqlite:///kvtune.db", description="SQLAlchemy URL; postgresql+psycopg://... for a cluster")
    api_token: SecretStr | None = Field(None, description="bearer token required by every write; unset: writes refused")
    auto_migrate: bool = Field(True, description="run Alembic migrations to head at API/worker start")

    # Request limits: checked before anything is queued.
    max_body_bytes: int = Field(64 * 1024, ge=1024)
    max_trials: int = Field(4096, ge=1)
    max_time_budget_s: float = Field(7 * 24 * 3600.0, gt=0)
    max_heads: int = Field(1024, ge=1)
    max_topk: int = Field(1 << 16, ge=1)
    max_window: int = Field(1 << 16, ge=1)
    max_buckets: int = Field(32, ge=1)
    max_bucket_size: int = Field(1 << 22, ge=1)
    max_attempts: int = Field(3, ge=1, le=100)

    # Workers (the CLI flags --gpu/--arch/--lease override these).
    gpu: int | None = Field(None, ge=0, description="the GPU index a worker owns")
    arch: str | None = Field(None, description="a worker's target; default: detected")
    lease_s: float = Field(60.0, gt=0, description="a job's lease; a worker silent this long loses it")
    heartbeat_s: float | None = Field(None, gt=0, description="default: a third of lease_s")
    poll_s: float = Field(1.0, gt=0, description="idle wait between claims")
    worker_tune: str = Field("tuner.search:tune", description="import path of the tune entry point")

    def heartbeat_interval(self) -> float:
        return self.heartbeat_s if self.heartbeat_s is not None else self.lease_s / 3

    def token(self) -> str | None:
        return self.api_token.get_secret_value() if self.api_token and self.api_token.get_secret_value() else None
