"""Every setting of the service (API and workers), from the environment with the KVTUNE_ prefix.

Built where it is used (the app factory, the worker's entry point), never at import, so tests and
tools can construct their own.

Secrets (the API token, a database URL with its password) can also come from files: with
`KVTUNE_SECRETS_DIR=/run/secrets` (what docker/compose.yaml sets), a file named after the variable
(`kvtune_api_token`, `kvtune_database_url`; case does not matter) supplies it, so compose secrets
work without putting the value in the environment. The environment wins over a file.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SecretsSettingsSource, SettingsConfigDict


INT32_MAX = 2**31 - 1


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="KVTUNE_", extra="ignore")

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[Any, ...]:
        # Read when a Settings is built (not at import), and only when asked for: a fixed secrets_dir
        # would warn on every machine that has no such directory.
        secrets_dir = os.environ.get("KVTUNE_SECRETS_DIR")
        files = SecretsSettingsSource(settings_cls, secrets_dir=secrets_dir) if secrets_dir else file_secret_settings
        return init_settings, env_settings, dotenv_settings, files

    database_url: str = Field("sqlite:///kvtune.db", description="SQLAlchemy URL; postgresql+psycopg://... for a cluster")
    api_token: SecretStr | None = Field(None, description="bearer token required by every write; unset: writes refused")
    auto_migrate: bool = Field(True, description="run Alembic migrations to head at API/worker start")

    # Request limits: checked before anything is queued.
    # Every limit on a stored integer stays within a 32-bit column (INT32_MAX): a larger value would
    # overflow it on PostgreSQL (a DataError), or a bucket's name its String(64) column.
    max_body_bytes: int = Field(64 * 1024, ge=1024, le=INT32_MAX)
    max_trials: int = Field(4096, ge=1, le=INT32_MAX)
    max_time_budget_s: float = Field(7 * 24 * 3600.0, gt=0, le=1e9)
    max_heads: int = Field(1024, ge=1, le=INT32_MAX)
    max_topk: int = Field(1 << 16, ge=1, le=INT32_MAX)
    max_window: int = Field(1 << 16, ge=1, le=INT32_MAX)
    max_buckets: int = Field(32, ge=1, le=256)
    max_bucket_size: int = Field(1 << 22, ge=1, le=INT32_MAX)
    max_ctx: int = Field(1 << 24, ge=0, le=INT32_MAX, description="largest context length of a bucket")
    max_attempts: int = Field(3, ge=1, le=100)
    max_workers_per_job: int = Field(64, ge=1, le=INT32_MAX, description="largest max_workers a distributed job may ask for")

    # The API's read path (api/read_path.py): how stale a bundle may be after a publish, how often
    # counted misses are written, and the auto-tune rule (db/misses.py; None or 0: off).
    bundle_check_s: float = Field(0.2, gt=0, le=60, description="seconds between publish-generation reads")
    miss_flush_s: float = Field(1.0, gt=0, le=3600, description="seconds between lookup-miss batch writes")
    auto_tune_misses: int | None = Field(None, ge=0, description="queue one tune job for a key after this many misses")

    # Workers (`kvtune worker` flags override these: --database-url, --gpu, --arch, --concurrency,
    # --lease, --heartbeat, --poll, --name, --no-join).
    gpu: int | None = Field(None, ge=0, description="the GPU index a worker owns")
    arch: str | None = Field(None, description="a worker's target; default: detected")
    lease_s: float = Field(60.0, gt=0, description="a job's lease; a worker silent this long loses it")
    heartbeat_s: float | None = Field(None, gt=0, description="default: a third of lease_s")
    poll_s: float = Field(1.0, gt=0, description="idle wait between claims")
    worker_tune: str = Field("tuner.search:tune", description="import path of the tune entry point")
    # Jobs one worker process runs at once, each in its own thread with its own lease. 1 on a GPU:
    # jobs sharing a device disturb each other's timings. More only for CPU-bound targets (interp)
    # or a tuner stand-in; the parallelism across GPUs comes from one worker per GPU instead.
    concurrency: int = Field(1, ge=1, le=64, description="jobs a worker runs in parallel")
    worker_name: str | None = Field(None, max_length=120,
                                    description="prefix of the worker's lease owner id (default: host:pid:gpuN)")
    join_distributed: bool = Field(True, description="join running distributed jobs of the arch when idle")

    def token(self) -> str | None:
        return self.api_token.get_secret_value() if self.api_token and self.api_token.get_secret_value() else None
