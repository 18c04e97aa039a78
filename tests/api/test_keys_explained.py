"""Issue 27: keys are explained where they are made (a pack job sent with heads=16 came back as
`h0.k0.w0` without a word; a heads=16 bundle's logits key is `h64`), and a job for an arch no live
worker has announced carries a warning (it would stay queued with no hint) in its response, in
`GET /v1/jobs/{id}` and on its dashboard page."""

from __future__ import annotations

from typing import Iterator

import httpx
import pytest

from api.app import create_app
from catalog.settings import Settings
from db import workers
from db.session import Database
from tests.service.procs import ThreadServer

TOKEN = "keys-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SEED = {"heads": 16, "topk": 512, "window": 128}


@pytest.fixture
def api(db_url: str) -> Iterator[tuple[httpx.Client, Database]]:
    app = create_app(Settings(database_url=db_url, api_token=TOKEN))
    with ThreadServer(app) as srv, httpx.Client(base_url=srv.url, timeout=30) as http:
        yield http, app.state.db


def _tune(http: httpx.Client, **body: object) -> dict:
    r = http.post("/v1/tune", headers=AUTH, json={**SEED, "trials": 2, **body})
    assert r.status_code == 202, r.text
    return r.json()


def test_jobs_and_bundles_say_what_their_key_ignores_or_fixes(api: tuple[httpx.Client, Database]) -> None:
    http, _ = api
    pack = _tune(http, kernel="pack", arch="interp", formats=["fp8_528"])
    assert pack["key_slug"].startswith("pack.interp.h0.k0.w0")
    assert any("heads, topk and window do not apply" in n for n in pack["notes"]), pack["notes"]
    query = _tune(http, kernel="pack", arch="interp", formats=["mxfp4_68", "query"])  # the MXFP4 query quantiser
    assert query["key_slug"].endswith("mxfp4_68+query") and "the query quantiser is keyed" in query["notes"][0]
    logits = _tune(http, kernel="logits", arch="interp")
    assert any("64 index heads" in n for n in logits["notes"]) and any("defaulted" in n for n in logits["notes"])
    decode = _tune(http, kernel="decode", arch="interp")
    assert decode["notes"] == ["formats defaulted to nvfp4_288, fp8_528"]
    assert _tune(http, kernel="decode", arch="interp", formats=["nvfp4_288", "fp8_528"])["notes"] == []
    assert http.get(f"/v1/jobs/{pack['id']}").json()["notes"] == [pack["notes"][0]]
    kernels = http.get("/v1/configs", params={"arch": "interp", **SEED}).json()["kernels"]
    assert any("stored as 0" in n for n in kernels["pack"]["notes"])
    assert any("64 index heads" in n for n in kernels["logits"]["notes"])


def test_a_job_no_live_worker_can_run_carries_a_warning(api: tuple[httpx.Client, Database]) -> None:
    http, db = api
    job = _tune(http, kernel="decode", arch="sm_90")
    (warning,) = job["warnings"]
    assert "no live worker for sm_90" in warning and "stays queued" in warning
    assert http.get(f"/v1/jobs/{job['id']}").json()["warnings"] == [warning]
    page = http.get(f"/dashboard/jobs/{job['id']}")
    assert page.status_code == 200 and 'data-warning="no-live-worker"' in page.text
    # A worker of that arch announces itself: no warning; one of another arch does not count.
    workers.announce(db, "gpu-host:1:gpu0:abc", "sm_90", 0)
    workers.announce(db, "cpu-host:2:interp:def", "interp", None)
    assert _tune(http, kernel="decode", arch="sm_90")["warnings"] == []
    assert http.get(f"/v1/jobs/{job['id']}").json()["warnings"] == []
    assert 'data-warning="no-live-worker"' not in http.get(f"/dashboard/jobs/{job['id']}").text
    assert workers.live_workers(db, "sm_90") == 1 and workers.live_workers(db, "sm_90", within_s=-1) == 0
    # It exits: the warning is back.
    workers.forget(db, "gpu-host:1:gpu0:abc")
    assert _tune(http, kernel="decode", arch="sm_90")["warnings"] == [warning]


def test_a_worker_process_announces_itself_while_it_runs(db_url: str) -> None:
    from db import migrate
    from kvtune.worker import Worker

    db = Database(db_url)
    migrate.upgrade(db)
    w = Worker(db, arch="interp", tune=lambda *a, **k: None, poll_s=0.05)
    seen: list[int] = []
    w.stop.clear()

    def stop_after_a_poll() -> None:
        seen.append(workers.live_workers(db, "interp"))
        w.stop.set()

    import threading

    threading.Timer(0.5, stop_after_a_poll).start()
    assert w.run() == 0
    assert seen == [1] and workers.live_workers(db, "interp") == 0  # announced while running, gone after
    db.dispose()
