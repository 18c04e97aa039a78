"""The names of the pluggable searches (`tuner.search` implements them): here, torch-free, so the
API can validate a request's `search` and list the names in its OpenAPI document."""

from __future__ import annotations

SEARCHES: tuple[str, ...] = ("tpe", "random", "grid")
DEFAULT_SEARCH = "tpe"
