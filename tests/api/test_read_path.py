"""The read path through a real uvicorn on loopback, on SQLite and the real PostgreSQL: bundle reads
write nothing (no transaction at all once cached), a publish invalidates the cache, misses reach the
table in batches, defaults' sources are served by hash, version-aware bundles with stale marks,
auto-tune after N misses under concurrent clients (one process and two), and POST /v1/misses."""

from __future__ import annotations

import hashlib
import sqlite3
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Iterator

import httpx
import pytest
from sqlalchemy import event, select
from sqlalchemy.engine import make_url

from api.app import create_app
from catalog.core import Bucket, Config, TrialStatus
from catalog.families import get_spec
from catalog.keys import make_key
from catalog.results import BucketResult, TrialRecord, TuneResult
from catalog.settings import Settings
from db import configs, migrate
from db.misses import AUTO_TUNE_SUBMITTER
from db.models import Job, LookupMiss
from db.session import Database
from tests.service.procs import REPO, ThreadServer, free_port, service_env, stop

TOKEN = "tok"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
SEED = {"arch": "interp", "heads": 16, "topk": 512, "window": 128}
DECODE = make_key("decode", "interp", 16, 512, 128)


class Site:
    def __init__(self, url: str, app: Any) -> None:
        self.url = url
        self.app = app
        self.db: Database = app.state.db
        self.rp = app.state.read_path
        self.http = httpx.Client(base_url=url, timeout=30)

    def stored_misses(self) -> dict[str, int]:
        return self.db.run(lambda s: {m.key_slug: m.count for m in s.scalars(select(LookupMiss))}, write=False)


def serve(db_url: str, **overrides: Any) -> Iterator[Site]:
    app = create_app(Settings(database_url=db_url, api_token=TOKEN, **overrides))
    with ThreadServer(app) as srv:
        site = Site(srv.url, app)
        yield site
        site.http.close()


@pytest.fixture
def site(db_url: str) -> Iterator[Site]:
    yield from serve(db_url)


def until(cond: Callable[[], Any], timeout: float = 10.0) -> Any:
    end = time.monotonic() + timeout
    while True:
        v = cond()
        if v or time.monotonic() > end:
            return v
        time.sleep(0.05)


def publish(db: Database, key: Any, bucket: Bucket, cfg: Config, *, triton: str = "3.6.0",
            device: str = "NVIDIA H200", us: float = 10.0) -> None:
    default = TrialRecord(number=0, bucket=bucket, config=get_spec(key.kernel).default_config(key),
                          status=TrialStatus.OK, time_us=2 * us, timing="cuda-graph")
    best = TrialRecord(number=1, bucket=bucket, config=cfg, status=TrialStatus.OK, time_us=us, timing="cuda-graph")
    result = TuneResult(key=key, target=key.arch, buckets=(BucketResult(bucket, default, best, (default, best)),),
                        device_name=device, triton_version=triton, torch_version="2.11.0", timing="cuda-graph")
    h = hashlib.sha256(f"{key.slug()}/{bucket.name()}/{cfg.as_dict()}/{triton}/{device}".encode()).hexdigest()[:16]
    db.run(lambda s: configs.publish(s, job_id=None, key=key, result=result, source_hashes={bucket.name(): h}))


def decode_bucket() -> Bucket:
    return get_spec("decode").buckets(DECODE)[0]


def tuned_cfg(block: int) -> Config:
    return get_spec("decode").default_config(DECODE).replace(num_warps=block)


class TxCounter:
    """Every transaction the app's engine begins (reads and writes), and the writes among them."""

    def __init__(self, db: Database) -> None:
        self.engine = db.engine
        self.begins = 0
        self.writes = 0
        event.listen(self.engine, "begin", self._on_begin)

    def _on_begin(self, conn: Any) -> None:
        self.begins += 1
        self.writes += conn.get_execution_options().get("sqlite_begin") == "IMMEDIATE"

    def close(self) -> None:
        event.remove(self.engine, "begin", self._on_begin)


def test_cached_reads_run_no_transaction_and_change_no_byte(db_url: str) -> None:
    # No generation poll and no flush during the reads: what is left is the request path itself.
    for site in serve(db_url, bundle_check_s=60, miss_flush_s=3600):
        first = site.http.get("/v1/configs", params=SEED)
        assert first.status_code == 200 and first.json()["misses"]
        version = None
        if site.db.is_sqlite:
            # data_version changes when another connection commits anything to the file.
            probe = sqlite3.connect(make_url(db_url).database)
            version = probe.execute("PRAGMA data_version").fetchone()[0]
        tx = TxCounter(site.db)
        try:
            for i in range(50):
                headers = {"If-None-Match": first.headers["etag"]} if i % 2 else {}
                r = site.http.get("/v1/configs", params=SEED, headers=headers)
                assert r.status_code == (304 if i % 2 else 200) and r.headers["etag"] == first.headers["etag"]
                assert site.http.get("/v1/warmup-keys", params=SEED).status_code == 200
        finally:
            tx.close()
        assert (tx.begins, tx.writes) == (0, 0)
        assert site.rp.cache.builds == 1
        if version is not None:
            assert probe.execute("PRAGMA data_version").fetchone()[0] == version
            probe.close()
        # The 50 reads were counted, in memory (the 50 warmup-key reads are not misses).
        assert site.rp.misses.pending() == 51 * len(first.json()["misses"])


def test_a_publish_invalidates_the_cached_bundle(site: Site) -> None:
    r1 = site.http.get("/v1/configs", params=SEED)
    etag1 = r1.headers["etag"]
    assert r1.json()["kernels"]["decode"]["tuned"] is False
    b = decode_bucket()
    publish(site.db, DECODE, b, tuned_cfg(8))
    r2 = until(lambda: (r := site.http.get("/v1/configs", params=SEED, headers={"If-None-Match": etag1})).status_code == 200 and r)
    assert r2, "the publish was not seen within 10 s"
    assert r2.headers["etag"] != etag1
    dec = r2.json()["kernels"]["decode"]
    entry = next(e for e in dec["buckets"] if e["name"] == b.name())
    assert dec["tuned"] is True and entry["default"] is False and entry["config"]["num_warps"] == 8
    assert DECODE.slug() not in r2.json()["misses"]
    # Unchanged bundle, unchanged ETag (it is the body's hash): a second publish of another key
    # moves the generation, the rebuilt bundle of this request is the same, and so is its ETag.
    etag2 = r2.headers["etag"]
    other = make_key("decode", "interp", 32, 512, 128)
    publish(site.db, other, get_spec("decode").buckets(other)[0], tuned_cfg(4))
    assert until(lambda: site.http.get("/v1/configs", params={**SEED, "heads": 32}).json()["kernels"]["decode"]["tuned"])
    assert site.http.get("/v1/configs", params=SEED, headers={"If-None-Match": etag2}).status_code == 304


def test_misses_reach_the_table_in_batches(db_url: str) -> None:
    for site in serve(db_url, miss_flush_s=0.5):
        slugs = site.http.get("/v1/configs", params=SEED).json()["misses"]
        for _ in range(39):
            site.http.get("/v1/configs", params=SEED)
        want = {s: 40 for s in slugs}
        assert until(lambda: site.stored_misses() == want), site.stored_misses()
        # 40 reads of 3 missing keys: a handful of write transactions, not 40 (or 120).
        assert 1 <= site.rp.flushes <= 10
        assert site.rp.misses.pending() == 0


def test_default_sources_are_served_by_hash_for_a_new_key(site: Site) -> None:
    b = site.http.get("/v1/configs", params={**SEED, "heads": 8, "formats": "nvfp4_288,fp8_528"}).json()
    # The decode pair of the README: pack takes one format and logits reads other records; the
    # bundle says so instead of failing.
    assert set(b["unavailable"]) == {"pack", "logits"} and set(b["kernels"]) == {"decode"}
    hashes = {e["source_hash"] for k in b["kernels"].values() for e in k["buckets"]}
    for h in hashes:
        r = site.http.get(f"/v1/kernels/{h}")
        assert r.status_code == 200 and "triton" in r.text


def test_version_aware_bundle_prefers_the_engines_stack_and_marks_the_rest_stale(site: Site) -> None:
    b = decode_bucket()
    publish(site.db, DECODE, b, tuned_cfg(2), triton="3.5.0", device="NVIDIA H100")
    publish(site.db, DECODE, b, tuned_cfg(8), triton="3.6.0", device="NVIDIA H200")  # supersedes the first

    def entry(**q: str) -> dict[str, Any]:
        body = until(lambda: (j := site.http.get("/v1/configs", params={**SEED, **q}).json())["kernels"]["decode"]["tuned"] and j)
        return next(e for e in body["kernels"]["decode"]["buckets"] if e["name"] == b.name())

    plain = entry()
    assert plain["config"]["num_warps"] == 8 and plain["stale"] is None
    same = entry(triton="3.6.0", device="NVIDIA H200")
    assert same["config"]["num_warps"] == 8 and same["stale"] is None
    # The superseded config was tuned on this engine's stack: it comes first for this engine.
    older = entry(triton="3.5.0", device="NVIDIA H100")
    assert older["config"]["num_warps"] == 2 and older["stale"] is None
    assert older["provenance"]["device_name"] == "NVIDIA H100"
    # Nothing tuned on this stack: the active config, marked with what differs.
    new_triton = entry(triton="3.7.0", device="NVIDIA H200")
    assert new_triton["config"]["num_warps"] == 8 and new_triton["stale"] == {"triton_version": "3.6.0"}
    other = entry(triton="3.7.0", device="NVIDIA B200")
    assert other["stale"] == {"triton_version": "3.6.0", "device_name": "NVIDIA H200"}
    assert entry(device="NVIDIA H100")["config"]["num_warps"] == 2
    # Defaults carry no stale mark (they are nobody's measurement).
    assert all(e["stale"] is None for e in site.http.get("/v1/configs", params={**SEED, "triton": "9"}).json()
               ["kernels"]["pack"]["buckets"])


def _auto_jobs(db: Database) -> dict[str, int]:
    rows = db.run(lambda s: list(s.execute(select(Job.key_slug, Job.submitted_by))), write=False)
    out: dict[str, int] = {}
    for slug, by in rows:
        assert by == AUTO_TUNE_SUBMITTER
        out[slug] = out.get(slug, 0) + 1
    return out


def _concurrent_gets(url: str, clients: int = 8, rounds: int = 3) -> list[int]:
    statuses: list[int] = []
    barrier = threading.Barrier(clients)

    def client() -> None:
        with httpx.Client(base_url=url, timeout=30) as http:
            barrier.wait(10)
            for _ in range(rounds):
                statuses.append(http.get("/v1/configs", params=SEED).status_code)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return statuses


def test_auto_tune_after_n_misses_queues_exactly_one_job_per_key(db_url: str) -> None:
    for site in serve(db_url, auto_tune_misses=3, miss_flush_s=0.2):
        # One miss of another decode key (pack's and logits' keys do not depend on heads): below N.
        below = make_key("decode", "interp", 4, 512, 128).slug()
        assert below in site.http.get("/v1/configs", params={**SEED, "heads": 4}).json()["misses"]
        statuses = _concurrent_gets(site.url)
        assert statuses == [200] * 24
        want = {s: 1 for s in site.http.get("/v1/configs", params=SEED).json()["misses"]}
        assert until(lambda: _auto_jobs(site.db) == want), _auto_jobs(site.db)
        assert below not in want
        assert _concurrent_gets(site.url) == [200] * 24  # still missing while the jobs are queued
        until(lambda: site.rp.misses.pending() == 0)
        time.sleep(0.5)
        assert _auto_jobs(site.db) == want


def test_two_worker_processes_share_one_port_and_queue_one_job_per_key(db_url: str, tmp_path: Any) -> None:
    db = Database(db_url)
    migrate.upgrade(db)
    port = free_port()
    env = service_env(db_url, KVTUNE_API_TOKEN=TOKEN, KVTUNE_AUTO_TUNE_MISSES="3", KVTUNE_MISS_FLUSH_S="0.2")
    log = open(tmp_path / "serve.log", "ab")
    code = f"from api.server import serve; serve(host='127.0.0.1', port={port}, workers=2, log_level='warning')"
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        def up() -> bool:
            try:
                return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        assert until(up, 60), (tmp_path / "serve.log").read_text()[-3000:]
        assert _concurrent_gets(url, rounds=4) == [200] * 32
        want = {s: 1 for s in httpx.get(f"{url}/v1/configs", params=SEED, timeout=30).json()["misses"]}
        assert until(lambda: _auto_jobs(db) == want), _auto_jobs(db)
        total = until(lambda: (m := db.run(lambda s: {x.key_slug: x.count for x in s.scalars(select(LookupMiss))},
                                           write=False)) == {s: 33 for s in want} and m)
        assert total, "the two processes' misses did not all reach the table"
    finally:
        stop(proc)
        log.close()
        db.dispose()
    assert proc.returncode == 0


def test_post_misses_counts_engine_reports_without_a_token(site: Site) -> None:
    item = {"kernel": "decode", "arch": "sm_90", "heads": 16, "topk": 512, "window": 128,
            "formats": ["nvfp4_288", "fp8_528"], "n": 100, "count": 3}
    r = site.http.post("/v1/misses", json={"misses": [item, {**item, "n": 7, "count": 2}]})
    assert r.status_code == 202 and r.json() == {"accepted": 5}, r.text
    slug = make_key("decode", "sm_90", 16, 512, 128, ["nvfp4_288", "fp8_528"]).slug()
    assert until(lambda: site.stored_misses() == {slug: 5}), site.stored_misses()
    bad = [
        {"misses": []},
        {"misses": [item] * 257},
        {"misses": [{**item, "kernel": "nope"}]},
        {"misses": [{**item, "arch": "sm_75"}]},
        {"misses": [{**item, "n": 0}]},
        {"misses": [{**item, "count": -1}]},
        {"misses": [{**item, "formats": ["bogus"]}]},
        {"misses": [{**item, "extra": 1}]},
        {"misses": [item, {**item, "heads": 10**9}]},  # one bad item: nothing of the report is counted
        {"nope": []},
    ]
    for body in bad:
        r = site.http.post("/v1/misses", json=body)
        assert r.status_code in (413, 422), (body, r.status_code, r.text)
    assert site.http.post("/v1/misses", content=b"{" * 100_000, headers={"content-type": "application/json"}).status_code == 413
    time.sleep(1.5)  # past a flush period: nothing more was counted
    assert site.stored_misses() == {slug: 5} and site.rp.misses.pending() == 0
    # Other writes still need the token.
    assert site.http.post("/v1/tune", json={}).status_code == 401
    # A decode key without heads is not a key (pack's has none: its key is the record format).
    assert site.http.post("/v1/misses", json={"misses": [{**item, "heads": 0}]}).status_code == 422


def test_the_runtimes_miss_reports_reach_the_table(site: Site) -> None:
    # What tuner.runtime's reporter sends (dispatch.miss_payload), through the engine client, to
    # the real route: the pack key of the engine's bundle (heads 0) and a decode key of its shape.
    from tuner.runtime.client import KvtuneClient
    from tuner.runtime.dispatch import MissCounter, MissReporter

    counter = MissCounter()
    pack, decode = make_key("pack", "sm_90"), make_key("decode", "sm_90", 16, 512, 128)
    for key, dim, n in ((pack, "N", 5_000_000), (pack, "N", 5_000_000), (decode, "T", 100)):
        counter.count(key, dim, n)
    with KvtuneClient(site.url) as client:
        reporter = MissReporter(counter, client.report_misses, device="NVIDIA H200", triton="3.6.0", interval_s=60.0)
        assert reporter.flush() and reporter.sent == 1, reporter.last_error
        reporter.close()
    assert until(lambda: site.stored_misses() == {pack.slug(): 2, decode.slug(): 1}), site.stored_misses()


def test_cached_answers_equal_the_routes_and_odd_spellings_go_to_the_route(site: Site) -> None:
    # The first answer is the route's (a cold key), the second the fast path's (api/bundle_fast_path.py).
    q = {**SEED, "formats": "nvfp4_288", "triton": "3.6.0"}
    cold = site.http.get("/v1/configs", params=q)
    builds = site.rp.cache.builds
    warm = site.http.get("/v1/configs", params=q)
    assert site.rp.cache.builds == builds
    assert (warm.status_code, warm.content, warm.headers["etag"], warm.headers["content-type"],
            warm.headers["cache-control"]) == (cold.status_code, cold.content, cold.headers["etag"],
                                               cold.headers["content-type"], cold.headers["cache-control"])
    not_modified = site.http.get("/v1/configs", params=q, headers={"If-None-Match": f'"x", W/{cold.headers["etag"]}'})
    assert not_modified.status_code == 304 and not_modified.content == b""
    # Spellings only the route decides: each answered exactly as the route answers it.
    base = "arch=interp&heads=16&topk=512&window=128"
    for qs, status in ((f"{base}&heads=016", 200), (f"{base}&heads=+16", 200), (f"{base}&heads=1e3", 422),
                       (f"{base}&heads=0", 422), (f"{base}&heads=99999999999", 422),
                       (f"{base}&formats={',' * 199}nvfp4_288", 422), (f"{base}&arch={'x' * 40}", 422),
                       ("heads=16&topk=512&window=128", 422), (f"{base}&heads=16&heads=x", 422)):
        r = site.http.get(f"/v1/configs?{qs}")
        assert r.status_code == status, (qs, r.status_code, r.text[:200])
        if status == 200:
            assert r.content == site.http.get(f"/v1/configs?{base}").content
    text = site.http.get("/metrics").text
    assert 'kvtune_http_requests_total{method="GET",route="/v1/configs",status="200"}' in text
    assert 'kvtune_http_requests_total{method="GET",route="/v1/configs",status="304"} 1' in text


def test_a_failed_flush_keeps_its_counts_for_the_next(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from api.read_path import ReadPath
    from db import misses as db_misses
    from db.errors import DatabaseUnavailable

    real = db_misses.flush
    calls = {"n": 0}

    def flaky(*a: Any, **kw: Any) -> list[int]:
        calls["n"] += 1
        if calls["n"] <= 2:
            raise DatabaseUnavailable("database unavailable: simulated outage")
        return real(*a, **kw)

    monkeypatch.setattr(db_misses, "flush", flaky)
    db = Database(db_url)
    migrate.upgrade(db)
    rp = ReadPath(db, check_s=0.05, flush_s=0.05)
    rp.misses.add([DECODE], 4)
    rp.start()
    try:
        rp.misses.add([DECODE], 3)
        assert until(lambda: calls["n"] >= 3 and rp.misses.pending() == 0)
    finally:
        rp.stop()
    try:
        assert db_misses.stored_counts(db) == {DECODE.slug(): 7}
        assert rp.cache.generation == (0, 0)  # the generation reads went on through the failed flushes
    finally:
        db.dispose()
