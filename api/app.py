"""The FastAPI app factory. Settings are built here (or passed in), never at import."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import AsyncIterator

from fastapi import FastAPI

from db import migrate
from db.session import Database

from api import errors
from api.bundle_fast_path import CachedBundleMiddleware
from api.middleware import OPEN_WRITES, BodyLimitMiddleware, MetricsMiddleware, RequestMetrics, WriteAuthMiddleware
from api.read_path import ReadPath
from api.routes import configs, dashboard, health, jobs, misses, tune
from catalog.settings import Settings

# Writes an engine makes without a token (see api/routes/misses.py for what bounds them).


def create_app(settings: Settings | None = None, *, db: Database | None = None) -> FastAPI:
    settings = settings or Settings()
    db = db or Database(settings.database_url)
    if settings.auto_migrate:
        migrate.upgrade(db)
    read_path = ReadPath(db, check_s=settings.bundle_check_s, flush_s=settings.miss_flush_s,
                         auto_tune_after=settings.auto_tune_misses)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        read_path.start()
        try:
            yield
        finally:
            read_path.stop()  # flushes the misses counted since the last tick
            db.dispose()

    app = FastAPI(title="kvtune", version="0.1.0", description="Tuned Triton configs for KV-cache attention kernels",
                  lifespan=lifespan)
    app.state.settings = settings
    app.state.db = db
    app.state.read_path = read_path
    app.state.request_metrics = RequestMetrics()
    errors.install(app)
    for router in (tune.router, jobs.router, configs.router, misses.router, health.router, dashboard.router):
        app.include_router(router)
    # Added inside-out: metrics sees every response, auth runs before the body is read, and a cached
    # bundle is answered before FastAPI's routing and parameter parsing.
    app.add_middleware(CachedBundleMiddleware, read_path=read_path)
    app.add_middleware(BodyLimitMiddleware, limit=settings.max_body_bytes)
    app.add_middleware(WriteAuthMiddleware, token=settings.token(), open_writes=OPEN_WRITES)
    app.add_middleware(MetricsMiddleware, metrics=app.state.request_metrics)

    return app
