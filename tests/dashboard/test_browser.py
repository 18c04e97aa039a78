"""A real headless Chromium on the dashboard of a database filled by a real tune job.

`kvtune serve` (uvicorn on loopback) and a `kvtune worker` on `interp` run a cheap pack job with the
real tuner; Chromium (Debian's, driven by Playwright without its own browser download) watches the
job page go live to succeeded, then loads the dashboard and checks, inside the page, that the charts
drew (bars per bucket, a progress path with points), that every request stayed on the server, and
that the lookup-miss button submits a tune job with the typed token and shows the 401 without one.
Screenshots are kept under the test's tmp dir and copied to tests/dashboard/artifacts/ (git-ignored).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from tuner.runtime.client import KvtuneClient
from tests.service.procs import start_server, start_worker, stop

pytestmark = pytest.mark.timeout(300)

TOKEN = "browser-token"
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
CHROMIUM = os.environ.get("KVTUNE_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
BUCKETS = [{"dim": "N", "lo": 1, "hi": 4}, {"dim": "N", "lo": 5, "hi": 8}]
TRIALS = 3


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: scripts/test.sh installs Debian's `chromium`")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


class Watch:
    """Every request a page makes and every error it logs, to assert nothing left the server."""

    def __init__(self, page: Any) -> None:
        self.urls: list[str] = []
        self.errors: list[str] = []
        page.on("request", lambda r: self.urls.append(r.url))
        page.on("pageerror", lambda e: self.errors.append(str(e)))
        page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)


def _poll_status(page: Any, timeout_s: float) -> list[tuple[str, str]]:
    """(status, trials done) as the job page shows them, until it says succeeded. Evaluations can
    race the page's own reload at the end, so a failed evaluation is just retried."""
    seen: list[tuple[str, str]] = []
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        try:
            state = page.evaluate("""() => [document.querySelector('#job')?.dataset.status || '',
                                            document.querySelector('#trials-done')?.textContent || '']""")
        except Exception:  # noqa: BLE001 - "execution context was destroyed" during the reload
            time.sleep(0.2)
            continue
        if not seen or seen[-1] != tuple(state):
            seen.append(tuple(state))
        if state[0] in ("succeeded", "failed", "cancelled"):
            return seen
        time.sleep(0.25)
    raise AssertionError(f"job page never showed an end state: {seen}")


def _shot(page: Any, tmp_path: Path, name: str) -> Path:
    out = tmp_path / name
    page.screenshot(path=str(out), full_page=True)
    assert out.stat().st_size > 10_000  # a real rendering, not an empty canvas
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copyfile(out, ARTIFACTS / name)
    return out


def test_dashboard_in_chromium_after_a_real_tune_job(browser: Any, tmp_path: Path) -> None:
    db_url = f"sqlite:///{tmp_path / 'kvtune.db'}"
    server, url = start_server(db_url, TOKEN, tmp_path / "serve.log")
    worker = start_worker(db_url, tmp_path / "worker.log", "--lease", "30", KVTUNE_POLL_S="0.2")
    http = httpx.Client(base_url=url, timeout=30)
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        # An engine asks for sm_90 configs nobody tuned: three lookup misses (no worker serves sm_90,
        # so a job the miss button queues stays queued and costs nothing).
        assert http.get("/v1/configs", params={"arch": "sm_90", "heads": 16, "topk": 512, "window": 128}).status_code == 200
        with KvtuneClient(url, token=TOKEN, timeout=10) as client:
            job = client.submit_tune(kernel="pack", arch="interp", heads=16, topk=512, window=128, buckets=BUCKETS,
                                     trials=TRIALS, search="random")

        # -- the job page, live ------------------------------------------------------------------
        page = ctx.new_page()
        watch = Watch(page)
        page.goto(f"{url}/dashboard/jobs/{job['id']}")
        seen = _poll_status(page, 200)
        assert seen[-1][0] == "succeeded", (seen, (tmp_path / "worker.log").read_text()[-3000:])
        # It was watched live: the page showed the job queued or running before it ended, with
        # trials counting up from polling, not from a reload.
        live = [(s, n) for s, n in seen if s in ("queued", "running")]
        assert len(live) >= 2 and any(s == "running" for s, _ in live), seen
        assert seen[-1][1] == str(TRIALS * len(BUCKETS)), seen
        page.wait_for_selector("#published table", timeout=30_000)  # the reload after success
        page.wait_for_selector("body[data-ready]")
        # A locator's wait runs in Playwright's own world: wait_for_function evaluates its string in the
        # page, which the dashboard's CSP (script-src 'self', no unsafe-eval) refuses whenever the rows
        # are not there at the first check (a CI run of 2026-12-05).
        best = page.locator("#best-rows tr.best-row")
        best.nth(1).wait_for(timeout=15_000)
        assert best.count() == 2
        job_chart = page.evaluate("""() => Array.from(document.querySelectorAll('[data-chart=progress] svg path.line'))
                                         .map(p => [p.closest('g').dataset.name, +p.dataset.points, p.getAttribute('d')])""")
        assert sorted(n for n, _, _ in job_chart) == ["N1-4", "N5-8"], job_chart
        assert all(1 <= pts <= TRIALS and d.startswith("M") and d.count("L") == pts - 1 for _, pts, d in job_chart)
        assert page.locator("#published tr.cfg").count() == 2
        _shot(page, tmp_path, "job.png")

        # -- the overview ------------------------------------------------------------------------
        page.goto(f"{url}/dashboard")
        page.wait_for_selector("body[data-ready]")
        charts = page.evaluate("""() => Array.from(document.querySelectorAll('figure.chart[data-kernel]')).map(f => ({
            kernel: f.dataset.kernel,
            bars: Array.from(f.querySelectorAll('svg rect.bar')).map(r => [r.dataset.label, +r.dataset.value,
                                                                          +r.getAttribute('height')]),
        }))""")
        assert [c["kernel"] for c in charts] == ["pack"], charts
        bars = charts[0]["bars"]
        assert [b[0] for b in bars] == ["N1-4", "N5-8"] and all(v > 0 and h > 0 for _, v, h in bars), bars
        progress = page.evaluate("""() => Array.from(document.querySelectorAll('#progress svg path.line')).map(p => +p.dataset.points)""")
        assert len(progress) == 2 and all(n >= 1 for n in progress), progress
        table = page.evaluate("""() => Array.from(document.querySelectorAll('table.key tr.cfg')).map(tr =>
            Array.from(tr.cells).map(td => td.textContent.trim()))""")
        assert [r[0] for r in table] == ["N1-4", "N5-8"]
        for r in table:
            assert r[1] != "-" and r[2] != "-" and r[3].endswith("x")  # default, tuned, speedup
            assert r[4] == "-"  # interp: no copy bandwidth, no roofline fraction
            assert r[5] == str(TRIALS) and r[7] == f"#{job['id']}" and r[10] == "3.6.0"
            assert "cpu-interpreter" in r[9]
        assert page.locator("tr.miss").count() == 3
        shot = _shot(page, tmp_path, "dashboard.png")

        # -- the miss button: a wrong token shows the 401 and writes nothing -----------------------
        n_jobs = len(http.get("/v1/jobs").json()["jobs"])
        miss = page.locator("tr.miss").first
        slug = miss.get_attribute("data-slug")
        page.fill("#token", "not-the-token")
        page.fill("#trials", "2")
        miss.locator("button.tune").click()
        page.wait_for_selector("#tune-status[data-state]")
        assert page.get_attribute("#tune-status", "data-state") == "error"
        assert "401" in page.inner_text("#tune-status") and "token" in page.inner_text("#tune-status")
        assert len(http.get("/v1/jobs").json()["jobs"]) == n_jobs
        # ... and the right one queues a job for that key.
        page.fill("#token", TOKEN)
        miss.locator("button.tune").click()
        page.wait_for_selector("#tune-status[data-state=ok]")
        listed = http.get("/v1/jobs").json()["jobs"]
        assert len(listed) == n_jobs + 1
        new = listed[0]
        assert new["key_slug"] == slug and new["status"] == "queued" and new["trials"] == 2 and new["arch"] == "sm_90"
        assert f"job #{new['id']} queued" in page.inner_text("#tune-status")

        # Nothing came from anywhere but this server, and no script error happened.
        assert watch.urls and all(u.startswith(url) or u.startswith("data:") for u in watch.urls), watch.urls
        # The one error the browser logs is the refused POST itself (Chromium reports every 4xx).
        assert watch.errors == ["Failed to load resource: the server responded with a status of 401 (Unauthorized)"], watch.errors
        assert shot.exists() and (ARTIFACTS / "dashboard.png").exists()
    finally:
        ctx.close()
        http.close()
        stop(worker)
        stop(server)


def test_chromium_draws_fifty_keys_across_three_archs_and_an_empty_database(browser: Any, tmp_path: Path) -> None:
    """The same page in Chromium at both ends of the range: one bar chart per kernel with one bar per
    bucket over 50 keys on 3 archs, and an empty database that draws no chart and throws nothing."""
    from api.app import create_app
    from catalog.settings import Settings
    from tests.dashboard import seed
    from tests.service.procs import ThreadServer

    for name, n_keys in (("empty", 0), ("fifty", 50)):
        app = create_app(Settings(database_url=f"sqlite:///{tmp_path / name}.db", api_token=TOKEN))
        keys = seed.fill_many(app.state.db, n_keys) if n_keys else []
        with ThreadServer(app) as srv:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            watch = Watch(page)
            page.goto(f"{srv.url}/dashboard")
            page.wait_for_selector("body[data-ready]")
            got = page.evaluate("""() => ({
                charts: Object.fromEntries(Array.from(document.querySelectorAll('figure.chart[data-kernel]')).map(f =>
                    [f.dataset.kernel, Array.from(f.querySelectorAll('svg rect.bar')).map(r => r.dataset.label)])),
                archs: Array.from(document.querySelectorAll('section.arch')).map(s => s.dataset.arch),
                tables: document.querySelectorAll('table.key').length,
                svgs: document.querySelectorAll('svg').length,
            })""")
            if n_keys:
                want = {k.kernel: [b.name() for b in seed.buckets_for(k)] for k in keys}
                assert got["charts"] == want, got
                assert sorted(got["archs"]) == sorted(seed.ARCHS) and got["tables"] == n_keys
                _shot(page, tmp_path, "dashboard-50-keys.png")
            else:
                assert got == {"charts": {}, "archs": [], "tables": 0, "svgs": 0}, got
                assert page.locator("#no-configs").is_visible() and page.locator("#no-misses").is_visible()
            assert watch.errors == [] and all(u.startswith(srv.url) or u.startswith("data:") for u in watch.urls)
            page.close()
        app.state.db.dispose()
