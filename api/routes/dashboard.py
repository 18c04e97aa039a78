"""GET /dashboard (tuned against default across archs, keys and buckets), /dashboard/jobs/{id} (one
job, live), the job page's progress JSON, and the page's own static files.

Query parameters are read as plain strings and checked here, so a hostile or malformed value gets
an HTML page with a 4xx status that says what was wrong, never a 5xx. Every value reaches the page
through Jinja's autoescape (or `tojson` inside a non-executed JSON script block), and the Content
Security Policy allows scripts from this origin only, so nothing is loaded from the internet.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from catalog.families import family_names
from catalog.targets import TARGETS
from catalog.core import ProblemKey
from catalog.keys import key_notes
from db import dashboard, workers
from db.errors import NotFound

from api.deps import DatabaseDep

router = APIRouter(prefix="/dashboard", tags=["dashboard"], include_in_schema=False)

ASSETS = Path(__file__).resolve().parent.parent / "dashboard"
STATIC = {"charts.js": "text/javascript", "dashboard.js": "text/javascript", "job.js": "text/javascript",
          "dashboard.css": "text/css"}
MAX_LIMIT = 1000
_SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _us(v: Any) -> str:
    if v is None:
        return "-"
    v = float(v)
    return f"{v:,.0f}" if v >= 1000 else f"{v:.2f}" if v < 10 else f"{v:.1f}"


def _pct(v: Any) -> str:
    return "-" if v is None else f"{100 * float(v):.1f}%"


def _speedup(v: Any) -> str:
    return "-" if v is None else f"{float(v):.2f}x"


def _when(v: Any) -> str:
    """ISO timestamps (UTC) as the tables show them: to the minute."""
    if not v:
        return "-"
    s = str(v)
    return f"{s[:10]} {s[11:16]} UTC" if len(s) >= 16 and s[10] == "T" else s


def _bw(v: Any) -> str:
    return "unknown" if v is None else f"{float(v) / 1e12:.2f} TB/s"


@lru_cache(maxsize=1)
def templates() -> jinja2.Environment:
    # autoescape=True for every template (not by extension): nothing a user or engine sent can
    # become markup. StrictUndefined: a template naming a missing field fails the tests, not silently.
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(ASSETS)), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(us=_us, pct=_pct, speedup=_speedup, bw=_bw, when=_when)
    return env


def _page(name: str, status_code: int = 200, **ctx: Any) -> HTMLResponse:
    return HTMLResponse(templates().get_template(name).render(**ctx), status_code=status_code, headers=_SECURITY_HEADERS)


def _error(status: int, title: str, problems: list[str]) -> HTMLResponse:
    return _page("error.html", status_code=status, title=title, problems=problems, status=status)


def _filters(arch: str | None, kernel: str | None, limit: str | None, job: str | None) -> tuple[dict[str, Any], list[str]]:
    """The main page's query, checked; a list of what is wrong instead of an exception."""
    problems: list[str] = []
    out: dict[str, Any] = {"arch": None, "kernel": None, "limit": 200, "job": None}
    # The filters name catalog entries: anything else is a typo the page says, not an empty table.
    for name, value, known in (("arch", arch, sorted(TARGETS)), ("kernel", kernel, list(family_names()))):
        if value:
            if value in known:
                out[name] = value
            else:
                problems.append(f"unknown {name} {value[:64]!r}; known: {', '.join(known)}")
    if limit not in (None, ""):
        n = _int(limit)
        if n is None or not 1 <= n <= MAX_LIMIT:
            problems.append(f"limit must be an integer from 1 to {MAX_LIMIT} (got {limit[:64]!r})")
        else:
            out["limit"] = n
    if job not in (None, ""):
        n = _int(job)
        if n is None:
            problems.append(f"job must be a positive integer (got {job[:64]!r})")
        else:
            out["job"] = n
    return out, problems


def _int(s: str) -> int | None:
    """A positive integer that fits the database's 32-bit ids, or None."""
    s = s.strip()
    if not s.isascii() or not s.isdigit() or len(s) > 10:
        return None
    n = int(s)
    return n if 1 <= n <= 2**31 - 1 else None


@router.get("", response_class=HTMLResponse)
def index(db: DatabaseDep, arch: str | None = None, kernel: str | None = None, limit: str | None = None,
          job: str | None = None) -> HTMLResponse:
    f, problems = _filters(arch, kernel, limit, job)
    if problems:
        return _error(422, "Bad query parameters", problems)
    data = dashboard.overview(db, arch=f["arch"], kernel=f["kernel"], limit=f["limit"])
    job_id = f["job"] or dashboard.latest_job_with_trials(db)
    progress = None
    if job_id is not None:
        try:
            progress = dashboard.study_progress(db, job_id)
        except NotFound:
            return _error(404, "No such job", [f"no job {job_id}"])
    return _page(
        "index.html", data=data, filters=f, progress=progress, notices=problems,
        misses=dashboard.misses(db, arch=f["arch"], kernel=f["kernel"]),
        jobs=dashboard.recent_jobs(db, arch=f["arch"], kernel=f["kernel"]),
        counts=dashboard.summary_counts(db), bandwidths=dashboard.COPY_BANDWIDTH_BPS,
        chart_data={"speedup": data["speedup_charts"], "progress": progress["series"] if progress else []},
    )


@router.get("/jobs/{job_id}", response_class=HTMLResponse)
def job_page(job_id: str, db: DatabaseDep) -> HTMLResponse:
    n = _int(job_id)
    if n is None:
        return _error(404, "No such job", [f"job ids are positive integers (got {job_id[:64]!r})"])
    try:
        detail = dashboard.job_detail(db, n)
    except NotFound:
        return _error(404, "No such job", [f"no job {n}"])
    job = detail["job"]
    warning = workers.no_worker_warning(db, job["arch"]) if job["status"] == "queued" else None
    notes = key_notes(ProblemKey.from_json(job["key"]), job["key"].get("formats")) if job.get("key") else []
    return _page("job.html", d=detail, warnings=[warning] if warning else [], notes=notes,
                 chart_data={"job_id": n, "progress": detail["series"]})


@router.get("/jobs/{job_id}/progress.json")
def job_progress(job_id: str, db: DatabaseDep) -> JSONResponse:
    n = _int(job_id)
    if n is None:
        return JSONResponse({"detail": "job ids are positive integers"}, status_code=404)
    try:
        return JSONResponse(dashboard.study_progress(db, n), headers={"Cache-Control": "no-store"})
    except NotFound as e:
        return JSONResponse({"detail": str(e)}, status_code=404)


@lru_cache(maxsize=len(STATIC))
def _asset(name: str) -> tuple[bytes, str]:
    body = (ASSETS / name).read_bytes()
    return body, '"' + hashlib.sha256(body).hexdigest()[:32] + '"'


@router.get("/static/{name}")
def static(name: str, request: Request) -> Response:
    if name not in STATIC:  # a fixed list: no path ever reaches the file system from the URL
        return Response("not found", status_code=404, media_type="text/plain")
    body, etag = _asset(name)
    headers = {"ETag": etag, "Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}
    if request.headers.get("if-none-match") == etag:
        return Response(status_code=304, headers=headers)
    return Response(body, media_type=f"{STATIC[name]}; charset=utf-8", headers=headers)
