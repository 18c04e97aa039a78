"""What a kernel family is before any GPU is involved: its names, variants and where each may be
rendered, its search space and default, its buckets, the modules a config renders and its bytes
model. Torch-free, so the API and the database can validate, default and size any key.

The launchers, inputs and verification that complete a family live below, in `tuner.kernels`
(`tuner.kernels.base.KernelFamily` extends this class). Every method a caller may use is declared
here, with its default where one exists: nobody probes a family with `getattr`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Sequence

from catalog.core import Bucket, Config, ProblemKey
from catalog.space import Space
from templates.render import Rendered, source_hash


class FamilySpec(ABC):
    """The catalog face of a kernel family (one instance per family, `catalog.families.get_spec`)."""

    name: str
    template: str

    # -- variants and legality -----------------------------------------------------------------
    @abstractmethod
    def variants(self) -> Sequence[str]:
        """Names of the template variants (for pack and the readers: the e2m1 backend)."""

    @abstractmethod
    def legality(self, variant: str, target: str) -> str | None:
        """None when `variant` may be rendered for `target`, else the reason it may not."""

    @abstractmethod
    def variant_of(self, config: Config) -> str:
        """The variant a config renders (what `legality` is asked about)."""

    def config_legality(self, config: Config, target: str) -> str | None:
        """None when `config` may run on `target`, else why not. By default its variant's legality;
        a family with parameters outside the variant that a target cannot run adds them (logits:
        LOADS=descriptor is NVIDIA's)."""
        return self.legality(self.variant_of(config), target)

    # -- space, defaults, buckets --------------------------------------------------------------
    @abstractmethod
    def space(self, key: ProblemKey) -> Space:
        """The search space for `key` (raises ValueError for formats the family cannot read)."""

    def default_config(self, key: ProblemKey) -> Config:
        return self.space(key).default()

    def canonical_config(self, key: ProblemKey, config: Config) -> Config:
        """The config a sample runs as. A variant that fixes parameters (logits' and decode's
        `wgmma`) makes every sample of it that differs only in those one config, so that a search
        reaches it at all and never measures it twice. By default the config itself."""
        return config

    def seed_configs(self, key: ProblemKey, target: str) -> list[Config]:
        """Configs a search measures right after the default (decode on sm_90: its wgmma path,
        which a few TPE trials over a space of thousands may never draw). None by default."""
        return []

    @abstractmethod
    def buckets(self, key: ProblemKey) -> list[Bucket]:
        """The default buckets of this kernel, each an explicit closed range."""

    # -- generated modules ---------------------------------------------------------------------
    @abstractmethod
    def render(self, key: ProblemKey, config: Config) -> Rendered:
        """The generated module a config runs (stored and served by its source hash)."""

    def modules(self, key: ProblemKey, config: Config) -> list[Rendered]:
        """Every generated module the launches of `config` use, `render(key, config)` first (decode's
        wgmma path also merges with the Triton module's decode_combine). A bundle stores all of
        them, since its warmup keys name each kernel's module by hash."""
        return [self.render(key, config)]

    # -- cost model ----------------------------------------------------------------------------
    @abstractmethod
    def bytes_moved(self, key: ProblemKey, bucket: Bucket) -> int:
        """Bytes one launch at the bucket's size must move (the roofline floor's numerator)."""


def measured_hash(rs: Sequence[Rendered]) -> str:
    """The content hash a trial's time belongs to, from its config's `modules`: the module's source
    hash, or where the config launches kernels of more than one module, a hash over all of theirs,
    so that a change to any of them (decode's wgmma path: its merge in the Triton module) makes
    stored trials of the config stale. One-module configs keep their source hash as it was."""
    if len(rs) == 1:
        return rs[0].source_hash
    return source_hash("+".join(r.source_hash for r in rs))
