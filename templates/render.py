"""Render Jinja templates into self-contained Triton modules and load them from real files.

Triton's `@jit` reads a kernel's source with `inspect`, so a rendered module must live in a real file:
each one is written once (atomically) under the cache directory, named by its content hash.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import ModuleType
from typing import Any, Mapping

import jinja2

TEMPLATE_DIR = Path(__file__).resolve().parent


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        undefined=jinja2.StrictUndefined,  # a missing variable is a bug, not an empty string
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


@dataclass(frozen=True)
class Rendered:
    template: str
    source: str

    @property
    def source_hash(self) -> str:
        return source_hash(self.source)


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def render(template: str, context: Mapping[str, Any]) -> Rendered:
    return Rendered(template, _env().get_template(template).render(**context))


def cache_dir() -> Path:
    d = Path(os.environ.get("KVTUNE_CACHE_DIR", Path.home() / ".cache" / "kvtune")) / "kernels"
    d.mkdir(parents=True, exist_ok=True)
    return d


def write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


_loaded: dict[str, ModuleType] = {}


def load(rendered: Rendered) -> ModuleType:
    """Import a rendered module (once per content hash per process)."""
    h = rendered.source_hash
    mod = _loaded.get(h)
    if mod is not None:
        return mod
    stem = f"kvtune_{Path(rendered.template).name.split('.')[0]}_{h}"
    path = cache_dir() / f"{stem}.py"
    if not path.exists() or path.read_text() != rendered.source:
        write_atomic(path, rendered.source)
    spec = importlib.util.spec_from_file_location(stem, path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[stem] = mod
    spec.loader.exec_module(mod)
    _loaded[h] = mod
    return mod
