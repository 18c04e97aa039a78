"""Turn a tune request into a job spec, or say clearly why not (InvalidRequest -> 422), before
anything is queued."""

from __future__ import annotations

import hashlib

from catalog.core import Bucket, ProblemKey
from catalog.families import family_names, get_spec
from catalog.keys import make_key
from catalog.settings import Settings
from catalog.targets import TARGETS
from db.errors import InvalidRequest
from db.jobs import JobSpec

from api.schemas import FORMAT_NAMES, TuneRequest


def check_arch(arch: str) -> None:
    if arch not in TARGETS:
        raise InvalidRequest(f"unknown arch {arch!r}; known: {sorted(TARGETS)}")


def check_kernel(kernel: str) -> None:
    """Only registered names: the family registry also takes dotted import paths, which must never
    be reachable from a request."""
    if kernel not in family_names():
        raise InvalidRequest(f"unknown kernel {kernel!r}; known: {list(family_names())}")


def check_shape(settings: Settings, heads: int, topk: int, window: int) -> None:
    for name, value, hi in (("heads", heads, settings.max_heads), ("topk", topk, settings.max_topk),
                            ("window", window, settings.max_window)):
        if value > hi:
            raise InvalidRequest(f"{name}={value} is larger than this service accepts ({hi})")


def check_formats(formats: list[str] | None) -> None:
    """Record formats, or a query dtype (a logits key's second format)."""
    for f in formats or ():
        if f not in FORMAT_NAMES:
            raise InvalidRequest(f"unknown record format {f!r}; known: {list(FORMAT_NAMES)}")


def key_for(kernel: str, arch: str, heads: int, topk: int, window: int, formats: list[str] | None) -> ProblemKey:
    try:
        return make_key(kernel, arch, heads, topk, window, formats)
    except (ValueError, TypeError, KeyError, IndexError) as e:
        raise InvalidRequest(f"cannot build a {kernel} key from this request: {e}") from None


def check_renders(key: ProblemKey) -> list[Bucket]:
    """The key's default buckets, once its space, default config and modules are known to build: any
    failure of the family here (a template's included) is the request's problem, named, not a 500."""
    family = get_spec(key.kernel)
    try:
        family.modules(key, family.default_config(key))
        return family.buckets(key)
    except Exception as e:  # noqa: BLE001  (whatever the family raises, the client gets it as a 422)
        raise InvalidRequest(f"{key.kernel} cannot be tuned for {key.slug()}: {type(e).__name__}: {e}") from None


def tune_spec(req: TuneRequest, settings: Settings, submitted_by: str | None = None) -> JobSpec:
    check_kernel(req.kernel)
    check_arch(req.arch)
    check_shape(settings, req.heads, req.topk, req.window)
    check_formats(req.formats)
    if req.trials > settings.max_trials:
        raise InvalidRequest(f"trials={req.trials} is more than this service accepts ({settings.max_trials})")
    if req.time_budget_s is not None and req.time_budget_s > settings.max_time_budget_s:
        raise InvalidRequest(f"time_budget_s={req.time_budget_s} is more than {settings.max_time_budget_s}")
    key = key_for(req.kernel, req.arch, req.heads, req.topk, req.window, req.formats)

    default_buckets = check_renders(key)

    buckets: tuple[Bucket, ...] | None = None
    if req.buckets:
        if len(req.buckets) > settings.max_buckets:
            raise InvalidRequest(f"{len(req.buckets)} buckets; at most {settings.max_buckets}")
        dims = sorted({b.dim for b in default_buckets})
        out = []
        for b in req.buckets:
            if b.dim not in dims:
                raise InvalidRequest(f"bucket dim {b.dim!r} is not a batch dimension of {key.kernel} (use {dims})")
            if b.hi > settings.max_bucket_size:
                raise InvalidRequest(f"bucket {b.dim}{b.lo}-{b.hi} is larger than {settings.max_bucket_size}")
            if b.ctx > settings.max_ctx:
                raise InvalidRequest(f"bucket context ctx={b.ctx} is longer than this service accepts ({settings.max_ctx})")
            try:
                out.append(Bucket(b.dim, b.lo, b.hi, b.ctx))
            except ValueError as e:
                raise InvalidRequest(str(e)) from None
        # Coverage is explicit: two buckets claiming the same batch size would make lookups ambiguous.
        for i, a in enumerate(out):
            for b2 in out[i + 1:]:
                if a.dim == b2.dim and a.ctx == b2.ctx and a.lo <= b2.hi and b2.lo <= a.hi:
                    raise InvalidRequest(f"buckets {a.name()} and {b2.name()} overlap")
        buckets = tuple(out)
    return JobSpec(
        key=key, buckets=buckets, trials=req.trials, search=req.search, time_budget_s=req.time_budget_s,
        seed=req.seed, max_attempts=settings.max_attempts, submitted_by=submitted_by,
    )


def request_digest(req: TuneRequest) -> str:
    """The request as validated, defaults filled in: a body that only spells out a default is the same
    request (an Idempotency-Key retry matches it)."""
    return hashlib.sha256(req.model_dump_json().encode()).hexdigest()
