"""`kvtune serve`: the API under uvicorn."""

from __future__ import annotations

import uvicorn

from api.app import create_app
from catalog.settings import Settings


def serve(host: str = "127.0.0.1", port: int = 8000, settings: Settings | None = None, log_level: str = "info") -> None:
    app = create_app(settings or Settings())
    uvicorn.run(app, host=host, port=port, log_level=log_level, proxy_headers=False)
