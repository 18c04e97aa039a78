"""The dashboard's server-rendered pages through a real uvicorn on loopback, on SQLite and the real
PostgreSQL: an empty database, one key, 50 keys across 3 archs, staleness, the roofline column,
escaping, and hostile query parameters (never a 5xx)."""

from __future__ import annotations

import json
from typing import Iterator

import httpx
import pytest

from api.app import create_app
from catalog.settings import Settings
from db.session import Database
from tests.dashboard import seed
from tests.dashboard.dom import Node, parse
from tests.service.procs import ThreadServer
from catalog.core import Bucket, ProblemKey, TrialStatus
from catalog.families.pack import pack_bytes
from catalog.keys import make_key

TOKEN = "dash-token"


class Site:
    def __init__(self, url: str, db: Database) -> None:
        self.db = db
        self.http = httpx.Client(base_url=url, timeout=60)

    def page(self, path: str = "/dashboard", status: int = 200, **params: str) -> Node:
        r = self.http.get(path, params=params)
        assert r.status_code == status, (path, params, r.status_code, r.text[:2000])
        assert r.headers["content-type"].startswith("text/html")
        assert "script-src 'self'" in r.headers["content-security-policy"]
        return parse(r.text)


@pytest.fixture
def site(db_url: str) -> Iterator[Site]:
    app = create_app(Settings(database_url=db_url, api_token=TOKEN))
    with ThreadServer(app) as srv:
        s = Site(srv.url, app.state.db)
        yield s
        s.http.close()


def chart_data(doc: Node) -> dict:
    node = doc.by_id("chart-data")
    assert node is not None and node.attrs["type"] == "application/json"
    return json.loads("".join(c for c in node.children if isinstance(c, str)))


def key_tables(doc: Node) -> list[Node]:
    return doc.find_all("table", cls="key")


def cfg_rows(table: Node) -> list[Node]:
    return table.find_all("tr", cls="cfg")


def test_empty_database(site: Site) -> None:
    doc = site.page()
    for empty in ("no-configs", "no-progress", "no-misses", "no-jobs"):
        assert doc.by_id(empty) is not None, empty
    assert key_tables(doc) == [] and doc.find_all("section", cls="arch") == []
    assert [doc.by_id(i).text() for i in ("n-archs", "n-keys", "n-configs", "n-misses", "n-jobs")] == ["0"] * 5
    assert chart_data(doc) == {"speedup": [], "progress": []}
    assert doc.find("script", src="/dashboard/static/charts.js") is not None
    # Filters over an empty database are still a page, not an error.
    assert key_tables(site.page(arch="sm_90", kernel="decode", limit="5")) == []
    site.page("/dashboard/jobs/1", status=404)
    for name, ctype in (("charts.js", "text/javascript"), ("dashboard.js", "text/javascript"),
                        ("job.js", "text/javascript"), ("dashboard.css", "text/css")):
        r = site.http.get(f"/dashboard/static/{name}")
        assert r.status_code == 200 and r.headers["content-type"].startswith(ctype) and len(r.content) > 500
        assert site.http.get(f"/dashboard/static/{name}", headers={"If-None-Match": r.headers["etag"]}).status_code == 304


def test_one_key(site: Site) -> None:
    key = make_key("pack", "sm_90", formats=["nvfp4_288"])
    b1, b2 = Bucket("N", 1, 64), Bucket("N", 65, 1024)
    seed.publish(site.db, key, [
        seed.Row(b1, default_us=12.0, tuned_us=8.0, failed=((TrialStatus.COMPILE_ERROR, 2), (TrialStatus.TIMEOUT, 1))),
        seed.Row(b2, default_us=30.0, tuned_us=30.0),
    ])
    seed.record_miss(site.db, make_key("decode", "sm_90", heads=32), times=3)
    doc = site.page()

    (section,) = doc.find_all("section", cls="arch")
    assert section.attrs["data-arch"] == "sm_90" and "4.27 TB/s" in section.text()
    (table,) = key_tables(doc)
    assert table.attrs["data-slug"] == key.slug() and table.attrs["data-kernel"] == "pack"
    rows = cfg_rows(table)
    assert [r.attrs["data-bucket"] for r in rows] == ["N1-64", "N65-1024"]
    first, second = rows[0].cells(), rows[1].cells()
    # bucket, default, tuned, speedup, of floor, trials, failed, job, date, device, Triton
    assert first[:4] == ["N1-64", "12.0", "8.00", "1.50x"]
    floor_us = pack_bytes("nvfp4_288", 64) / 4.272e12 * 1e6
    assert first[4] == f"{100 * floor_us / 12.0:.1f}% → {100 * floor_us / 8.0:.1f}%"
    assert first[5] == "5" and first[6] == "compile_error 2 timeout 1"  # default + 3 failed + best
    assert first[7] == "-" and first[8].startswith("20") and first[9] == "NVIDIA H200 (cuda-graph)" and first[10] == "3.6.0"
    assert second[:4] == ["N65-1024", "30.0", "30.0", "1.00x"] and second[6] == "0"
    assert not any("stale" in r.classes for r in rows)

    data = chart_data(doc)
    assert data["speedup"] == [{"kernel": "pack", "labels": ["N1-64", "N65-1024"], "values": [1.5, 1.0], "counts": [1, 1]}]
    assert [doc.by_id(i).text() for i in ("n-archs", "n-keys", "n-configs", "n-misses")] == ["1", "1", "2", "1"]

    (miss,) = doc.find_all("tr", cls="miss")
    assert miss.cells()[:3] == ["3", "decode", "sm_90"]
    body = json.loads(miss.find("button", cls="tune").attrs["data-body"])
    assert body == {"kernel": "decode", "arch": "sm_90", "heads": 32, "topk": 512, "window": 128,
                    "formats": ["nvfp4_288", "fp8_528"]}


def test_fifty_keys_three_archs_and_stale(site: Site) -> None:
    keys = seed.fill_many(site.db, 50)
    # An older Triton on sm_90 for one more key: only its rows are stale.
    old = make_key("decode", "sm_90", heads=48, topk=4096)
    seed.publish(site.db, old, [seed.Row(Bucket("T", 1, 1), 50.0, 40.0)], triton="3.5.1")
    doc = site.page()

    sections = doc.find_all("section", cls="arch")
    assert sorted(s.attrs["data-arch"] for s in sections) == sorted(seed.ARCHS)
    tables = key_tables(doc)
    assert sorted(t.attrs["data-slug"] for t in tables) == sorted(k.slug() for k in keys + [old])
    for s in sections:
        want = {k.slug() for k in keys + [old] if k.arch == s.attrs["data-arch"]}
        assert {t.attrs["data-slug"] for t in key_tables(s)} == want
    n_rows = sum(len(seed.buckets_for(k)) for k in keys) + 1
    assert sum(len(cfg_rows(t)) for t in tables) == n_rows
    assert doc.by_id("n-keys").text() == "51" and doc.by_id("n-archs").text() == "3"
    assert doc.by_id("n-configs").text() == str(n_rows) and doc.by_id("truncated") is None

    stale = doc.find_all("tr", cls="stale")
    assert len(stale) == 1 and stale[0].find("span", cls="badge") is not None
    (old_table,) = [t for t in tables if t.attrs["data-slug"] == old.slug()]
    assert cfg_rows(old_table)[0].cells()[10] == "3.5.1 stale"
    # Roofline: known for sm_90, "-" where the copy bandwidth is unknown.
    arch_of = {k.slug(): k.arch for k in keys + [old]}
    for t in tables:
        arch = arch_of[t.attrs["data-slug"]]
        floors = [r.cells()[4] for r in cfg_rows(t)]
        assert all(f.endswith("%") for f in floors) if arch == "sm_90" else all(f == "-" for f in floors), (arch, floors)

    charts = chart_data(doc)["speedup"]
    assert [c["kernel"] for c in charts] == ["decode", "logits", "pack"]
    for c in charts:
        assert len(c["labels"]) == len(c["values"]) >= 1 and all(v > 1.0 for v in c["values"])
        assert sum(c["counts"]) == sum(1 for t in tables if t.attrs["data-kernel"] == c["kernel"]
                                       for r in cfg_rows(t) if r.attrs["data-bucket"] in c["labels"])

    # Filters and the key limit.
    only = site.page(arch="gfx950")
    assert {t.attrs["data-slug"] for t in key_tables(only)} == {k.slug() for k in keys if k.arch == "gfx950"}
    packs = site.page(kernel="pack")
    assert {t.attrs["data-kernel"] for t in key_tables(packs)} == {"pack"} and len(key_tables(packs)) == sum(
        1 for k in keys if k.kernel == "pack")
    limited = site.page(limit="10")
    assert len(key_tables(limited)) == 10 and "10 of 51" in limited.by_id("truncated").text()


def test_everything_is_escaped(site: Site) -> None:
    evil = "<script>alert('x')</script>"
    key = ProblemKey("pack", "sm_90", 0, 0, 0, formats=("nvfp4_288",), head_dim=256)
    seed.publish(site.db, key, [seed.Row(Bucket("N", 1, 64), 10.0, 9.0)], device=f"<img src=x onerror=alert(1)>{evil}")
    seed.record_miss(site.db, ProblemKey("decode", evil, 16, 512, 128, formats=("nvfp4_288", '"quoted\'')))
    r = site.http.get("/dashboard")
    assert r.status_code == 200
    assert evil not in r.text and "<img src=x" not in r.text
    assert "&lt;img src=x onerror=alert(1)&gt;" in r.text and "&lt;script&gt;" in r.text
    doc = parse(r.text)
    assert len(doc.find_all("script")) == 3  # the JSON block, charts.js, dashboard.js: nothing injected
    (miss,) = doc.find_all("tr", cls="miss")
    assert json.loads(miss.find("button", cls="tune").attrs["data-body"])["arch"] == evil  # intact, as data
    assert "</script>" not in "".join(c for c in doc.by_id("chart-data").children if isinstance(c, str))


HOSTILE_QUERIES = [
    {"arch": "<script>alert(1)</script>"}, {"arch": "' OR 1=1 --"}, {"arch": "\x00"}, {"arch": "a" * 5000},
    {"arch": "sm_90\r\nX-Injected: 1"}, {"arch": "../../etc/passwd"}, {"kernel": "%s%s%s"}, {"kernel": "🙂"},
    {"limit": "-1"}, {"limit": "0"}, {"limit": "abc"}, {"limit": "1e9"}, {"limit": "99999999999999999999"},
    {"limit": "１０"}, {"limit": "1001"}, {"limit": " "}, {"limit": "NaN"}, {"job": "-5"}, {"job": "0"},
    {"job": "abc"}, {"job": "2147483648"}, {"job": "999999"}, {"job": "1.5"}, {"unknown": "x"},
]
HOSTILE_PATHS = [
    "/dashboard/jobs/0", "/dashboard/jobs/-1", "/dashboard/jobs/abc", "/dashboard/jobs/1.5", "/dashboard/jobs/999999",
    "/dashboard/jobs/99999999999999999999", "/dashboard/jobs/%3Cscript%3E", "/dashboard/jobs/%00",
    "/dashboard/jobs/1%20OR%201=1", "/dashboard/jobs/abc/progress.json", "/dashboard/jobs/0/progress.json",
    "/dashboard/jobs/999999/progress.json", "/dashboard/static/..%2fapp.py", "/dashboard/static/app.py",
    "/dashboard/static/%2e%2e", "/dashboard/static/", "/dashboard/jobs/", "/dashboard/nope",
    "/dashboard?arch=a&arch=<i class=evil>&limit=1&limit=-1", "/dashboard?%ff=%fe", "/dashboard?job=%F0%9F%99%82",
]


def test_hostile_query_parameters_never_5xx(site: Site) -> None:
    key = make_key("pack", "sm_90")
    seed.publish(site.db, key, [seed.Row(Bucket("N", 1, 64), 10.0, 9.0)])
    job_id = seed.submit_job(site.db, key)
    seen: dict[str, int] = {}
    for q in HOSTILE_QUERIES:
        r = site.http.get("/dashboard", params=q)
        seen[repr(q)] = r.status_code
        assert r.status_code < 500, (q, r.status_code, r.text[:500])
        assert "<script>alert" not in r.text and "<i class=evil>" not in r.text
    for path in HOSTILE_PATHS:
        r = site.http.get(path)
        seen[path] = r.status_code
        assert r.status_code < 500, (path, r.status_code, r.text[:500])
        assert "<script>alert" not in r.text
    # What each kind of bad input gets: a page naming the problem, 422 or 404, never a 200 that hides it.
    assert seen[repr({"arch": "<script>alert(1)</script>"})] == 422 and seen[repr({"limit": "-1"})] == 422
    assert seen[repr({"limit": "abc"})] == 422 and seen[repr({"job": "abc"})] == 422
    assert seen[repr({"job": "999999"})] == 404  # a job that does not exist: a 404 page that says so
    assert "no job 999999" in site.http.get("/dashboard", params={"job": "999999"}).text
    # Names that are not in the catalog are typos, not empty tables (README: 422 naming the problem).
    for q in ({"arch": "bogus"}, {"kernel": "attention"}):
        r = site.http.get("/dashboard", params=q)
        assert r.status_code == 422 and f"unknown {next(iter(q))}" in r.text, (q, r.status_code)
    assert site.http.get("/dashboard", params={"arch": "sm_90", "kernel": "pack"}).status_code == 200
    assert seen["/dashboard/jobs/abc"] == 404 and seen["/dashboard/jobs/999999"] == 404
    assert seen["/dashboard/jobs/999999/progress.json"] == 404 and seen["/dashboard/static/app.py"] == 404
    err = site.page(status=422, arch="<script>alert(1)</script>")
    assert err.by_id("error").attrs["data-status"] == "422" and "unknown arch" in err.text()
    # The real job still renders, with its status.
    job = site.page(f"/dashboard/jobs/{job_id}")
    assert job.by_id("job").attrs["data-status"] == "queued"
    assert json.loads(site.http.get(f"/dashboard/jobs/{job_id}/progress.json").text)["job"]["status"] == "queued"
