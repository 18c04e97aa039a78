"""The engine side's HTTP client (httpx only: importing it loads no torch), which
`TunedKernels.from_server` and scripts use: fetch the config bundle at startup, with timeouts, retries with
backoff on transient failures (connection errors, timeouts, 5xx, 429), and ETag reuse (a bundle
that did not change comes back as 304 and the cached copy is returned). Also the few calls a
script needs to submit a tune job and wait for it.
"""

from __future__ import annotations

import random
import time
from typing import Any, Sequence

import httpx

RETRY_STATUS = frozenset({429, 500, 502, 503, 504})


class ClientError(Exception):
    """The server refused the request (4xx) or stayed unavailable through every retry."""

    def __init__(self, message: str, status: int | None = None, body: Any = None) -> None:
        super().__init__(message)
        self.status = status
        self.body = body


class KvtuneClient:
    def __init__(self, base_url: str, *, token: str | None = None, timeout: float = 5.0, retries: int = 4,
                 backoff_s: float = 0.2, transport: httpx.BaseTransport | None = None) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=base_url.rstrip("/"), timeout=timeout, headers=headers, transport=transport)
        self.retries = retries
        self.backoff_s = backoff_s
        self._etags: dict[str, tuple[str, dict[str, Any]]] = {}  # request URL -> (etag, bundle)

    def __enter__(self) -> KvtuneClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _request(self, method: str, url: str, **kw: Any) -> httpx.Response:
        delay = self.backoff_s
        last: str = ""
        for attempt in range(self.retries + 1):
            try:
                r = self._http.request(method, url, **kw)
            except (httpx.TransportError, httpx.TimeoutException) as e:
                last = f"{type(e).__name__}: {e}"
            else:
                if r.status_code not in RETRY_STATUS:
                    return r
                last = f"HTTP {r.status_code}"
                ra = r.headers.get("retry-after")
                if ra and ra.isdigit():
                    delay = max(delay, float(ra))
            if attempt < self.retries:
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 5.0)
        raise ClientError(f"{method} {url}: gave up after {self.retries + 1} attempts ({last})")

    @staticmethod
    def _check(r: httpx.Response) -> Any:
        if r.status_code >= 400:
            try:
                body = r.json()
            except ValueError:
                body = r.text
            detail = body.get("detail") if isinstance(body, dict) else body
            raise ClientError(f"HTTP {r.status_code}: {detail}", status=r.status_code, body=body)
        return r.json()

    # -- engines -----------------------------------------------------------------------------------
    def fetch_bundle(self, arch: str, heads: int, topk: int, window: int, formats: Sequence[str] | None = None,
                     *, triton: str | None = None, device: str | None = None) -> dict[str, Any]:
        """The bundle of a model shape. `triton` and `device` (the engine's Triton version and GPU
        name) let the server put configs measured with both first."""
        params: dict[str, Any] = {"arch": arch, "heads": heads, "topk": topk, "window": window}
        if formats:
            params["formats"] = ",".join(formats)
        if triton:
            params["triton"] = triton
        if device:
            params["device"] = device
        url = str(httpx.URL("/v1/configs", params=params))
        cached = self._etags.get(url)
        headers = {"If-None-Match": cached[0]} if cached else {}
        r = self._request("GET", url, headers=headers)
        if r.status_code == 304 and cached:
            return cached[1]
        bundle = self._check(r)
        if r.headers.get("etag"):
            self._etags[url] = (r.headers["etag"], bundle)
        return bundle

    def report_misses(self, payload: dict[str, Any]) -> Any:
        """POST /v1/misses: an engine's counts of calls no tuned bucket covered
        (`{"device", "triton", "misses": [{"key_slug", "dim", "n", "count"}]}`, see
        tuner/runtime/dispatch.py). Sent from the runtime's reporter thread, never a serving call."""
        return self._check(self._request("POST", "/v1/misses", json=payload))

    def kernel_source(self, source_hash: str) -> str:
        r = self._request("GET", f"/v1/kernels/{source_hash}")
        if r.status_code >= 400:
            self._check(r)
        return r.text

    # -- engineers ---------------------------------------------------------------------------------
    def submit_tune(self, **body: Any) -> dict[str, Any]:
        # A POST is retried only on failures where the server cannot have queued anything twice:
        # connection errors before sending are the common case; a 5xx after queuing could duplicate
        # a job, which is harmless (a second tune of the same key).
        return self._check(self._request("POST", "/v1/tune", json=body))

    def job(self, job_id: int) -> dict[str, Any]:
        return self._check(self._request("GET", f"/v1/jobs/{job_id}"))

    def cancel(self, job_id: int) -> dict[str, Any]:
        return self._check(self._request("DELETE", f"/v1/jobs/{job_id}"))

    def wait(self, job_id: int, *, timeout_s: float = 600.0, poll_s: float = 0.5, on_progress: Any = None) -> dict[str, Any]:
        """Poll until the job is succeeded, failed or cancelled (or raise on timeout)."""
        end = time.monotonic() + timeout_s
        while True:
            j = self.job(job_id)
            if on_progress is not None:
                on_progress(j)
            if j["status"] in ("succeeded", "failed", "cancelled"):
                return j
            if time.monotonic() > end:
                raise ClientError(f"job {job_id} still {j['status']} after {timeout_s:.0f} s")
            time.sleep(poll_s)

    def healthy(self) -> bool:
        try:
            return self._http.get("/healthz").status_code == 200
        except httpx.HTTPError:
            return False
