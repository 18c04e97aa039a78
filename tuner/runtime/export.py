"""The export folder: a bundle as files an air-gapped fleet copies next to its engine.

One JSON file per kernel, key and GPU, named the way vLLM names its tuned-config files
(`key=value` pairs joined by commas, the GPU's name last with spaces as underscores):

    kernel=decode,heads=16,topk=512,window=128,formats=nvfp4_288+fp8_528,device_name=NVIDIA_H200.json

Each holds the bundle's entry of that kernel (per bucket: config, source hash, times, provenance
with the Triton and torch versions, warmup keys) and the generated sources it names lie under
`sources/<hash>.py`. `read_export` rebuilds the bundle `GET /v1/configs` would have served, so
`TunedKernels.from_folder` and `from_server` consume one shape. Torch-free: the CLI writes exports
from the database without importing the tuner's kernels.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Mapping, Sequence

from catalog.families import family_names
from catalog.keys import make_key
from templates.render import source_hash, write_atomic

EXPORT_VERSION = 1
SOURCES_DIR = "sources"

FormatsArg = Sequence[str] | Mapping[str, Sequence[str]] | None


class ExportError(ValueError):
    """An export folder that does not hold what was asked for, or holds it inconsistently."""


def device_file_name(device_name: str) -> str:
    """vLLM's spelling of a GPU in a file name: spaces as underscores (and nothing a path cannot hold)."""
    return re.sub(r"[^A-Za-z0-9_.+\-]", "_", device_name.replace(" ", "_")) or "unknown"


def export_file_name(key: Mapping[str, Any], device_name: str) -> str:
    """`kernel=...,heads=...,topk=...,window=...,formats=a+b,device_name=...json` for a ProblemKey's JSON."""
    fmts = "+".join(key.get("formats") or ()) or "-"
    return (f"kernel={key['kernel']},heads={key['heads']},topk={key['topk']},window={key['window']},"
            f"formats={fmts},device_name={device_file_name(device_name)}.json")


def needed_sources(kernel_entry: Mapping[str, Any]) -> list[str]:
    """Every source hash one kernel's entry names: its buckets' modules and their warmup keys'."""
    hashes: set[str] = set()
    for e in kernel_entry["buckets"]:
        hashes.add(str(e["source_hash"]))
        for k in (e.get("warmup") or {}).get("keys", ()):
            hashes.add(str(k["source_hash"]))
    return sorted(hashes)


def write_export(bundle: Mapping[str, Any], sources: Mapping[str, str], out_dir: str | Path,
                 device_name: str) -> list[Path]:
    """Write every kernel of `bundle` (the JSON `GET /v1/configs` returns) for the GPU `device_name`
    under `out_dir`, with each source it names (`sources`: hash -> module text). Returns the JSON
    files written. A source missing from `sources`, or one whose text does not hash to its name,
    raises before anything is written."""
    out = Path(out_dir)
    kernels = bundle.get("kernels") or {}
    if not kernels:
        raise ExportError("the bundle has no kernels to export")
    need = sorted({h for k in kernels.values() for h in needed_sources(k)})
    missing = [h for h in need if h not in sources]
    if missing:
        raise ExportError(f"no source text for {missing} (fetch them with GET /v1/kernels/<hash>)")
    wrong = [h for h in need if source_hash(sources[h]) != h]
    if wrong:
        raise ExportError(f"source text does not hash to its name: {wrong}")
    (out / SOURCES_DIR).mkdir(parents=True, exist_ok=True)
    for h in need:
        write_atomic(out / SOURCES_DIR / f"{h}.py", sources[h])
    written = []
    for name, k in sorted(kernels.items()):
        doc = {
            "kvtune_export": EXPORT_VERSION,
            "kernel": name,
            "arch": bundle["arch"],
            "device_name": device_name,
            "key": k["key"],
            "key_slug": k["key_slug"],
            "tuned": bool(k.get("tuned")),
            "buckets": list(k["buckets"]),
            "sources": {h: f"{SOURCES_DIR}/{h}.py" for h in needed_sources(k)},
        }
        path = out / export_file_name(k["key"], device_name)
        write_atomic(path, json.dumps(doc, indent=1, sort_keys=True) + "\n")
        written.append(path)
    return written


def formats_for(kernel: str, formats: FormatsArg) -> Sequence[str] | None:
    """The formats a kernel's key takes from a constructor's `formats`: one list for every kernel,
    a mapping kernel -> list, or None (each family's default)."""
    if formats is None:
        return None
    if isinstance(formats, Mapping):
        got = formats.get(kernel)
        return tuple(got) if got else None
    return tuple(formats)


def _load(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ExportError(f"{path}: not a readable export file ({e})") from None
    if not isinstance(doc, dict) or doc.get("kvtune_export") != EXPORT_VERSION:
        raise ExportError(f"{path}: not a kvtune export (version {EXPORT_VERSION})")
    return doc


def _pick_device(paths: list[Path], device_name: str | None, what: str) -> Path:
    if device_name is not None:
        exact = [p for p in paths if p.name.endswith(f",device_name={device_file_name(device_name)}.json")]
        if exact:
            return exact[0]
    if len(paths) == 1:
        return paths[0]  # another GPU's: the runtime's device check says so
    raise ExportError(f"{what}: {len(paths)} GPUs' files and none for {device_name!r}: "
                      f"{sorted(p.name for p in paths)}")


def read_export(folder: str | Path, *, arch: str, heads: int, topk: int, window: int,
                formats: FormatsArg = None, device_name: str | None = None,
                kernels: Sequence[str] | None = None) -> tuple[dict[str, Any], dict[str, str]]:
    """The bundle (as `GET /v1/configs` serves it) and the sources (hash -> text) an export folder
    holds for a model shape on `arch`. Per kernel the file of `device_name`, else the folder's only
    GPU for that key; a kernel with no file is left out, listed under `"unavailable"`."""
    root = Path(folder)
    if not root.is_dir():
        raise ExportError(f"{root}: no such export folder")
    files = sorted(root.glob("kernel=*.json"))
    out: dict[str, Any] = {}
    unavailable: dict[str, str] = {}
    sources: dict[str, str] = {}
    for name in kernels or family_names():
        try:
            key = make_key(name, arch, heads, topk, window, formats_for(name, formats))
        except ValueError as e:
            unavailable[name] = str(e)
            continue
        prefix = export_file_name(key.to_json(), "x").rsplit(",device_name=", 1)[0] + ","
        paths = [p for p in files if p.name.startswith(prefix)]
        docs = [(p, d) for p in paths if (d := _load(p))["arch"] == arch and d["key_slug"] == key.slug()]
        if not docs:
            unavailable[name] = f"no export file for {key.slug()} in {root}"
            continue
        path = _pick_device([p for p, _ in docs], device_name, key.slug())
        doc = dict(docs)[path]
        for h, rel in doc["sources"].items():
            text = (root / rel).read_text()
            if source_hash(text) != h:
                raise ExportError(f"{root / rel}: its text does not hash to {h}")
            sources[h] = text
        out[name] = {"key": doc["key"], "key_slug": doc["key_slug"], "tuned": doc["tuned"], "buckets": doc["buckets"],
                     "device_name": doc["device_name"]}
    bundle = {"arch": arch, "heads": heads, "topk": topk, "window": window,
              "formats": None if formats is None or isinstance(formats, Mapping) else list(formats),
              "kernels": out, "misses": [], "unavailable": unavailable, "source": str(root)}
    return bundle, sources
