"""`kvtune export`: a model shape's configs as files for fleets that cannot reach the API.

The bundle comes from the database (`KVTUNE_DATABASE_URL`, read only: an export records no lookup
miss) or from a running API (`--url`); its generated sources come with it. The folder format is
`tuner.runtime.export`'s (documented in docs/engine.md); `TunedKernels.from_folder` reads it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from tuner.runtime.export import ExportError, needed_sources, write_export


def _from_database(database_url: str | None, shape: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    from catalog.settings import Settings
    from db.bundles import BundleRequest, read_bundle
    from db.configs import get_source
    from db.errors import NotFound
    from db.session import Database

    db = Database(database_url or Settings().database_url)
    try:
        formats = tuple(shape["formats"]) if shape["formats"] else None
        built = read_bundle(db, BundleRequest(shape["arch"], shape["heads"], shape["topk"], shape["window"], formats))
        # Defaults nobody has fetched yet are rendered, not stored: the read hands their text back.
        sources = {h: text for h, _template, text in built.unstored_sources}
        for h in sorted({h for k in built.bundle["kernels"].values() for h in needed_sources(k)} - set(sources)):
            try:
                sources[h] = get_source(db, h).source
            except NotFound:
                raise ExportError(f"the database has no source for hash {h}") from None
        return built.bundle, sources
    finally:
        db.dispose()


def _from_api(url: str, token: str | None, shape: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    from tuner.runtime.client import KvtuneClient

    with KvtuneClient(url, token=token) as client:
        bundle = client.fetch_bundle(shape["arch"], shape["heads"], shape["topk"], shape["window"], shape["formats"])
        need = sorted({h for k in bundle["kernels"].values() for h in needed_sources(k)})
        return bundle, {h: client.kernel_source(h) for h in need}


def bundle_device(bundle: dict[str, Any]) -> str | None:
    """The GPU the bundle's tuned configs were measured on; None when nothing is tuned. A bundle
    measured on several GPU models is refused: an export file holds one GPU's configs."""
    names = {(e.get("provenance") or {}).get("device_name") for k in bundle["kernels"].values()
             for e in k["buckets"] if not e.get("default")}
    names.discard(None)
    if len(names) > 1:
        raise ExportError(f"the tuned configs come from several GPUs {sorted(names)}: pass --device-name")
    return next(iter(names), None)


def export(out: str | Path, *, arch: str, heads: int, topk: int, window: int, formats: Sequence[str] | None = None,
           url: str | None = None, token: str | None = None, database_url: str | None = None,
           device_name: str | None = None) -> list[Path]:
    """Write the export of one model shape under `out`; returns the JSON files written."""
    shape = {"arch": arch, "heads": heads, "topk": topk, "window": window, "formats": list(formats) if formats else None}
    bundle, sources = _from_api(url, token, shape) if url else _from_database(database_url, shape)
    device = device_name or bundle_device(bundle)
    if device is None:
        raise ExportError("nothing is tuned for this shape: name the GPU the defaults are for with --device-name")
    return write_export(bundle, sources, out, device)
