"""GET /healthz (database reachable and migrated) and GET /metrics (Prometheus text format)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from sqlalchemy import text

from db import configs, jobs
from db.errors import DomainError

from api.deps import DatabaseDep
from api.schemas import HealthBody

router = APIRouter(tags=["health"])


@router.get("/healthz", response_model=HealthBody,
            responses={503: {"model": HealthBody, "description": "the database is unreachable or not migrated"}})
def healthz(db: DatabaseDep) -> JSONResponse:
    try:
        db.run(lambda s: s.execute(text("SELECT 1")).scalar(), write=False, retries=1)
    except DomainError as e:
        return JSONResponse(status_code=503, content={"status": "unavailable", "database": str(e)})
    return JSONResponse({"status": "ok", "database": db.dialect})


def _labels(**kv: object) -> str:
    def esc(v: object) -> str:
        return str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in kv.items()) + "}"


@router.get("/metrics", response_class=PlainTextResponse)
def metrics(request: Request, db: DatabaseDep) -> PlainTextResponse:
    lines: list[str] = []
    lines += ["# HELP kvtune_jobs Jobs by status.", "# TYPE kvtune_jobs gauge"]
    for status, n in sorted(jobs.counts_by_status(db).items()):
        lines.append(f"kvtune_jobs{_labels(status=status)} {n}")
    c = configs.counts(db)
    lines += ["# HELP kvtune_configs_active Active (served) configs.", "# TYPE kvtune_configs_active gauge",
              f"kvtune_configs_active {c['configs_active']}"]
    lines += ["# HELP kvtune_kernel_sources Generated sources stored.", "# TYPE kvtune_kernel_sources gauge",
              f"kvtune_kernel_sources {c['kernel_sources']}"]
    lines += ["# HELP kvtune_lookup_misses_total Bundle lookups that found no tuned config.",
              "# TYPE kvtune_lookup_misses_total counter", f"kvtune_lookup_misses_total {c['lookup_misses']}"]
    requests, seconds = request.app.state.request_metrics.snapshot()
    lines += ["# HELP kvtune_http_requests_total HTTP requests served by this process.",
              "# TYPE kvtune_http_requests_total counter"]
    for (method, route, status), n in sorted(requests.items()):
        lines.append(f"kvtune_http_requests_total{_labels(method=method, route=route, status=status)} {n}")
    lines += ["# HELP kvtune_http_request_seconds_total Time spent serving HTTP requests.",
              "# TYPE kvtune_http_request_seconds_total counter"]
    for (method, route), sec in sorted(seconds.items()):
        lines.append(f"kvtune_http_request_seconds_total{_labels(method=method, route=route)} {sec:.6f}")
    return PlainTextResponse("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")
