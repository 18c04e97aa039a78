"""`kvtune db upgrade|current` against both databases, as an operator (or a compose file) runs it."""

from __future__ import annotations

import subprocess
import sys

from db import migrate
from db.session import Database
from tests.service.procs import REPO, service_env


def test_kvtune_db_upgrade_and_current(db_url: str) -> None:
    env = service_env(db_url)
    cur = subprocess.run([sys.executable, "-m", "kvtune.cli", "db", "current"], env=env, cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert cur.returncode == 0, cur.stderr
    assert "revision None" in cur.stdout
    up = subprocess.run([sys.executable, "-m", "kvtune.cli", "db", "upgrade"], env=env, cwd=REPO,
                        capture_output=True, text=True, timeout=60)
    assert up.returncode == 0, up.stderr
    head = migrate.head_revision()
    assert f"revision {head} (head {head})" in up.stdout
    db = Database(db_url)
    assert migrate.current_revision(db) == head
    db.dispose()
