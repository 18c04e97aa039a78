"""The API is a JSON server: `kvtune serve` answers every route without importing torch or triton.

The server runs as its own process (the `kvtune serve` entry point under uvicorn, on loopback); at
exit it writes the names of every module it had loaded, and the test reads them back after driving
each route once. torch alone costs an API process ~300 MB resident and seconds of start-up.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx

from tests.service.procs import REPO, free_port, service_env

TOKEN = "torch-free-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
# Runs `kvtune serve` and, when uvicorn returns after SIGTERM, dumps sys.modules to argv[1].
# uvicorn re-raises the SIGTERM it caught once it has shut down, through the handler that was
# installed before it started: this one exits normally, so the atexit dump runs.
WRAPPER = """
import atexit, json, signal, sys
out = sys.argv[1]
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
from kvtune.cli import main
sys.exit(main(sys.argv[2:]))
"""
FORBIDDEN = ("torch", "triton", "tuner", "numpy", "optuna")


def _serve(db_url: str, modules_file: Path, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = service_env(db_url, KVTUNE_API_TOKEN=TOKEN)
    proc = subprocess.Popen([sys.executable, "-c", WRAPPER, str(modules_file), "serve", "--host", "127.0.0.1",
                             "--port", str(port)], cwd=REPO, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    end = time.monotonic() + 60
    while time.monotonic() < end:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"kvtune serve did not answer:\n{log.read_text()[-3000:]}")


def _drive_every_route(http: httpx.Client) -> None:
    seed = {"arch": "interp", "heads": 16, "topk": 512, "window": 128}
    bundle = http.get("/v1/configs", params=seed)
    assert bundle.status_code == 200, bundle.text
    source_hash = bundle.json()["kernels"]["pack"]["buckets"][0]["source_hash"]
    assert http.get(f"/v1/kernels/{source_hash}").status_code == 200
    assert http.get("/v1/warmup-keys", params=seed).status_code == 200
    job = http.post("/v1/tune", headers=AUTH, json={"kernel": "decode", "arch": "interp", "heads": 16, "topk": 512,
                                                     "window": 128, "trials": 2})
    assert job.status_code == 202, job.text
    job_id = job.json()["id"]
    assert http.get("/v1/jobs").status_code == 200
    assert http.get(f"/v1/jobs/{job_id}").status_code == 200
    assert http.get("/dashboard").status_code == 200
    assert http.get(f"/dashboard/jobs/{job_id}").status_code == 200
    assert http.get(f"/dashboard/jobs/{job_id}/progress.json").status_code == 200
    assert http.get("/dashboard/static/charts.js").status_code == 200
    assert http.get("/metrics").status_code == 200
    assert http.delete(f"/v1/jobs/{job_id}", headers=AUTH).status_code == 200
    # Validation reaches the catalog's families, spaces and formats.
    bad = http.post("/v1/tune", headers=AUTH, json={"kernel": "decode", "arch": "interp", "formats": ["nope"]})
    assert bad.status_code == 422


def test_kvtune_serve_answers_every_route_without_torch_or_triton(tmp_path: Path) -> None:
    modules_file = tmp_path / "modules.json"
    log = tmp_path / "serve.log"
    proc, url = _serve(f"sqlite:///{tmp_path / 'api.db'}", modules_file, log)
    try:
        with httpx.Client(base_url=url, timeout=30) as http:
            _drive_every_route(http)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    loaded = json.loads(modules_file.read_text())
    assert "api.app" in loaded and "db.bundles" in loaded and "catalog.families.decode" in loaded
    heavy = sorted(m for m in loaded if m.split(".")[0] in FORBIDDEN)
    assert heavy == [], f"the API process imported {heavy[:20]}"
