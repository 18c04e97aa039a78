"""One job end to end: `kvtune serve` (real uvicorn on loopback) and a `kvtune worker` process on
`interp` running the real tuner, on SQLite and on the real PostgreSQL; the engine client gets the
bundle with the tuned config and its generated source."""

from __future__ import annotations

import time
from pathlib import Path

from tuner.runtime.client import KvtuneClient
from tests.service.procs import start_server, start_worker, stop
from templates.render import source_hash

TOKEN = "e2e-token"


def test_tune_job_end_to_end(db_url: str, tmp_path: Path) -> None:
    server, url = start_server(db_url, TOKEN, tmp_path / "serve.log")
    worker = start_worker(db_url, tmp_path / "worker.log", "--lease", "20")
    try:
        with KvtuneClient(url, token=TOKEN, timeout=10) as client:
            job = client.submit_tune(kernel="pack", arch="interp", heads=16, topk=512, window=128,
                                     buckets=[{"dim": "N", "lo": 1, "hi": 4}], trials=3, search="tpe")
            seen: list[str] = []
            done = client.wait(job["id"], timeout_s=150, poll_s=0.3, on_progress=lambda j: seen.append(j["status"]))
            assert done["status"] == "succeeded", (done, (tmp_path / "worker.log").read_text()[-3000:])
            assert "running" in seen or done["progress"]["trials_done"] == 3
            assert done["attempt"] == 1 and done["progress"]["trials_done"] == 3
            assert sum(done["trials_by_status"].values()) == 3
            best = done["best"]["N1-4"]
            assert best["published"] is True and best["time_us"] > 0 and best["default_time_us"] > 0

            t0 = time.monotonic()
            bundle = client.fetch_bundle("interp", 16, 512, 128)
            pack = bundle["kernels"]["pack"]
            assert pack["tuned"] is True and pack["key_slug"] == done["key_slug"]
            tuned = [e for e in pack["buckets"] if not e["default"]]
            assert [e["name"] for e in tuned] == ["N1-4"]
            e = tuned[0]
            assert e["config"] == best["params"] and e["time_us"] == best["time_us"]
            assert e["provenance"]["job_id"] == job["id"] and e["provenance"]["timing"] == "cpu-interpreter"
            assert e["provenance"]["triton_version"] == "3.6.0"
            # Buckets the job did not tune keep explicit default entries; none overlaps N1-4.
            assert all(d["default"] for d in pack["buckets"] if d["name"] != "N1-4")
            assert all(d["bucket"]["lo"] > 4 for d in pack["buckets"] if d["default"])
            src = client.kernel_source(e["source_hash"])
            assert source_hash(src) == e["source_hash"] and "@triton.jit" in src
            assert client.fetch_bundle("interp", 16, 512, 128) == bundle  # ETag reuse
            assert time.monotonic() - t0 < 10
        assert stop(worker) == 0  # SIGTERM while idle: a clean exit
    finally:
        stop(worker)
        stop(server)
