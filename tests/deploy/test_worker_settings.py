"""Worker settings from the environment (KVTUNE_*), each overridden by its `kvtune worker` flag;
secrets from files (KVTUNE_SECRETS_DIR, what compose secrets give); and concurrency: one worker
process running two jobs at once, one lease each."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select

from catalog.settings import Settings
from db import jobs, migrate
from db.models import Job, TrialResult
from db.session import Database
from tests.service.procs import REPO, service_env
from catalog.core import Bucket
from catalog.keys import make_key

FAKE = {"KVTUNE_WORKER_TUNE": "tests.service.fake_tune:tune"}


def worker(db_url: str, *args: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kvtune.cli", "worker", *args], cwd=REPO, env=service_env(db_url, **env),
                          capture_output=True, text=True, timeout=timeout)


def test_flags_override_the_environment(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'env.db'}"
    env = dict(FAKE, KVTUNE_ARCH="interp", KVTUNE_CONCURRENCY="3", KVTUNE_WORKER_NAME="from-env",
               KVTUNE_POLL_S="0.05", KVTUNE_LEASE_S="30", KVTUNE_HEARTBEAT_S="5")
    r = worker(url, "--max-idle", "0.2", **env)
    assert r.returncode == 0, r.stderr
    assert "from-env:" in r.stderr and "worker for interp on sqlite (concurrency 3)" in r.stderr
    # The flags win; the database URL too (the env's file is not even created).
    other = tmp_path / "flag.db"
    r = worker("sqlite:///nowhere/unused.db", "--max-idle", "0.2", "--concurrency", "2", "--name", "from-flag",
               "--database-url", f"sqlite:///{other}", "--lease", "4", **env)
    assert r.returncode == 0, r.stderr
    assert "from-flag:" in r.stderr and "from-env" not in r.stderr and "(concurrency 2)" in r.stderr
    assert other.exists() and not (REPO / "nowhere").exists()


def test_invalid_worker_settings_exit_2_with_a_message(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'k.db'}"
    r = worker(url, "--arch", "interp", "--lease", "3", "--heartbeat", "5", **FAKE)
    assert r.returncode == 2 and "heartbeat 5s must be shorter than the lease 3s" in r.stderr
    r = worker(url, "--arch", "interp", "--concurrency", "0", **FAKE)
    assert r.returncode == 2 and "concurrency" in r.stderr


def test_secrets_come_from_files_and_the_environment_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "kvtune_api_token").write_text("from-file\n")
    (tmp_path / "KVTUNE_DATABASE_URL").write_text("postgresql+psycopg://kvtune:pw@db:5432/kvtune\n")
    for k in ("KVTUNE_API_TOKEN", "KVTUNE_DATABASE_URL"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("KVTUNE_SECRETS_DIR", str(tmp_path))
    s = Settings()
    assert s.token() == "from-file" and s.database_url == "postgresql+psycopg://kvtune:pw@db:5432/kvtune"
    monkeypatch.setenv("KVTUNE_API_TOKEN", "from-env")
    assert Settings().token() == "from-env"
    monkeypatch.delenv("KVTUNE_SECRETS_DIR")
    monkeypatch.delenv("KVTUNE_API_TOKEN")
    assert Settings().token() is None  # no directory named: no file is read


def test_concurrency_runs_jobs_in_parallel_under_separate_leases(db_url: str) -> None:
    db = Database(db_url)
    migrate.upgrade(db)
    key = make_key("pack", "interp", formats=["fp8_528"])
    ids = jobs.submit_many(db, [jobs.JobSpec(key=key, buckets=(Bucket("N", 1, 4),), trials=4, seed=s) for s in (1, 2)])
    r = worker(db_url, "--arch", "interp", "--concurrency", "2", "--once", "--poll", "0.05", timeout=90,
               KVTUNE_FAKE_TRIAL_S="0.4", **FAKE)
    assert r.returncode == 0, r.stderr[-3000:]
    rows = db.run(lambda s: s.execute(select(Job.id, Job.status, Job.started_at, Job.finished_at)).all(), write=False)
    owners = db.run(lambda s: s.execute(select(TrialResult.job_id, TrialResult.worker).distinct()).all(), write=False)
    db.dispose()
    assert sorted(r.id for r in rows) == ids and {r.status for r in rows} == {"succeeded"}
    by_job = {o.job_id: o.worker for o in owners}
    assert len(by_job) == 2 and {w.rsplit("/", 1)[1] for w in by_job.values()} == {"s0", "s1"}
    a, b = sorted(rows, key=lambda r: r.started_at)
    assert b.started_at < a.finished_at  # they overlapped: 4 trials x 0.4 s each, at the same time
