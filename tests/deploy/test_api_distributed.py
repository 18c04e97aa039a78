"""POST /v1/tune with `distributed`: accepted and stored; the combinations that cannot work are 422
before anything is queued. (SQLite only: the route is dialect-free; the queue's side runs on both.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from api.app import create_app
from catalog.settings import Settings
from db import jobs
from tests.service.procs import ThreadServer

TOKEN = "deploy-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PACK: dict[str, Any] = {"kernel": "pack", "arch": "interp", "heads": 16, "topk": 512, "window": 128,
                        "buckets": [{"dim": "N", "lo": 1, "hi": 4}], "trials": 8}


def test_distributed_flag(tmp_path: Path) -> None:
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'k.db'}", api_token=TOKEN, max_workers_per_job=8))
    db = app.state.db
    with ThreadServer(app) as srv, httpx.Client(base_url=srv.url, timeout=30) as http:
        r = http.post("/v1/tune", json={**PACK, "distributed": True, "max_workers": 4}, headers=AUTH)
        assert r.status_code == 202, r.text
        body = r.json()
        assert (body["distributed"], body["max_workers"]) == (True, 4)
        j = jobs.get(db, body["id"])
        assert (j.distributed, j.max_workers) == (True, 4)
        r = http.post("/v1/tune", json=PACK, headers=AUTH)
        assert r.status_code == 202 and r.json()["distributed"] is False and r.json()["max_workers"] is None
        for bad, why in (({"distributed": True, "search": "grid"}, "grid search runs on one worker"),
                         ({"max_workers": 2}, "distributed jobs only"),
                         ({"distributed": True, "max_workers": 9}, "max_workers=9 is more than 8"),
                         ({"distributed": True, "max_workers": 0}, "max_workers"),
                         ({"distributed": "yes"}, "distributed")):
            r = http.post("/v1/tune", json={**PACK, **bad}, headers=AUTH)
            assert r.status_code == 422 and why in r.json()["detail"], (bad, r.text)
        assert len(jobs.list_jobs(db)) == 2
