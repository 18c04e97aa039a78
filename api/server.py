"""`kvtune serve`: the API under uvicorn, in one process or in N worker processes on one port.

With `workers > 1` uvicorn binds the socket once and starts N processes that each build the app from
`worker_app` (settings from the KVTUNE_* environment) and accept on the shared socket; each keeps
its own bundle cache and miss counter (api/read_path.py), all in step through the database. The
migrations run once, here, before the workers start, so N processes never race to migrate one
database.
"""

from __future__ import annotations

import uvicorn
from fastapi import FastAPI

from api.app import create_app
from catalog.settings import Settings


def worker_app() -> FastAPI:
    """The app of one worker process (uvicorn's `factory=True` target)."""
    return create_app(Settings(auto_migrate=False))


def serve(host: str = "127.0.0.1", port: int = 8000, settings: Settings | None = None, log_level: str = "info",
          workers: int = 1) -> None:
    if workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    if workers == 1:
        app = create_app(settings or Settings())
        uvicorn.run(app, host=host, port=port, log_level=log_level, proxy_headers=False)
        return
    if settings is not None:
        raise ValueError("with workers > 1 every worker reads its settings from the KVTUNE_* environment")
    settings = Settings()
    if settings.auto_migrate:
        from db import migrate
        from db.session import Database

        db = Database(settings.database_url)
        try:
            migrate.upgrade(db)
        finally:
            db.dispose()
    uvicorn.run("api.server:worker_app", factory=True, workers=workers, host=host, port=port, log_level=log_level,
                proxy_headers=False)
