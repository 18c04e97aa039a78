"""What every kernel family provides, and the search-space data types.

A search space is data: typed parameters with their choices and default, serialisable to JSON next
to the values chosen. Parameters marked `render=True` are template (variant) choices and produce a
different generated module; the rest are launch-time constexprs and `num_warps`/`num_stages`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Protocol, Sequence

from tuner.core import Bucket, Config, ProblemKey
from tuner.render import Rendered, source_hash

if TYPE_CHECKING:
    # Imported inside the functions that use it: every compiler child (tuner.compile) imports this
    # module, and torch would cost each ~3 s of a ~1.5 s compile.
    import torch


@dataclass(frozen=True)
class Param:
    name: str
    choices: tuple[Any, ...]
    default: Any
    render: bool = False  # a template choice (changes the generated source) or a launch param

    def __post_init__(self) -> None:
        if self.default not in self.choices:
            raise ValueError(f"default {self.default!r} of {self.name} is not among its choices {self.choices}")

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "choices": list(self.choices), "default": self.default, "render": self.render}


@dataclass(frozen=True)
class Space:
    params: tuple[Param, ...]
    # A config is feasible when every constraint returns None; otherwise the string says why not.
    constraints: tuple[Callable[[Config], str | None], ...] = ()

    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def default(self) -> Config:
        return Config.from_dict({p.name: p.default for p in self.params})

    def infeasible(self, config: Config) -> str | None:
        d = config.as_dict()
        for p in self.params:
            if p.name not in d:
                return f"missing parameter {p.name}"
            if d[p.name] not in p.choices:
                return f"{p.name}={d[p.name]!r} is not among {list(p.choices)}"
        extra = set(d) - set(self.names())
        if extra:
            return f"unknown parameters {sorted(extra)}"
        for c in self.constraints:
            why = c(config)
            if why:
                return why
        return None

    def grid(self) -> Iterator[Config]:
        """Every feasible config (the exhaustive grid)."""
        for values in itertools.product(*(p.choices for p in self.params)):
            cfg = Config.from_dict(dict(zip(self.names(), values)))
            if self.infeasible(cfg) is None:
                yield cfg

    def to_json(self) -> list[dict[str, Any]]:
        return [p.to_json() for p in self.params]

    def restrict(self, choices: Mapping[str, Sequence[Any]]) -> "Space":
        """The same space with fewer choices for some parameters (same constraints): a sub-grid
        small enough to measure whole. Each subset must keep the parameter's default."""
        unknown = set(choices) - set(self.names())
        if unknown:
            raise ValueError(f"unknown parameters {sorted(unknown)}; known: {list(self.names())}")
        params = []
        for p in self.params:
            if p.name not in choices:
                params.append(p)
                continue
            keep = tuple(c for c in p.choices if c in tuple(choices[p.name]))
            extra = [c for c in choices[p.name] if c not in p.choices]
            if extra:
                raise ValueError(f"{p.name}: {extra} are not among {list(p.choices)}")
            if p.default not in keep:
                raise ValueError(f"{p.name}: a restriction must keep the default {p.default!r}")
            params.append(Param(p.name, keep, p.default, p.render))
        return Space(params=tuple(params), constraints=self.constraints)


@dataclass(frozen=True)
class XCompileCase:
    """One variant as the cross-compiler builds it: rendered source, kernel name and signature."""

    variant: str
    rendered: Rendered
    kernel_name: str
    signature: dict[str, str]
    constexprs: dict[str, Any]
    num_warps: int = 4
    num_stages: int = 2
    detail: str = ""  # e.g. the record format the case was rendered for
    # Integer arguments the seed launch passes as multiples of 16: Triton specialises such ints
    # (tt.divisibility), which is what lets a load built on them vectorise; compiled without the
    # hint, a row load of records became 64 one-byte loads in the sm_90 SASS.
    aligned_ints: tuple[str, ...] = ()
    # Where not empty, the only targets the case is legal on, on top of its variant's legality (a
    # build option of one launch, e.g. a programmatic dependent launch: NVIDIA sm_90 and later).
    only_targets: tuple[str, ...] = ()


class KernelFamily(Protocol):
    """What the tuner, the CLI and the service need from a kernel family.

    `inputs` is a family-defined dict of tensors (and scalars) for one launch at one size; `run`
    must be capturable in a CUDA graph (no host sync, no allocation that changes between replays)
    and returns the outputs `verify` checks against the family's reference.
    """

    name: str
    template: str

    def variants(self) -> Sequence[str]:
        """Names of the template variants (for pack and the readers: the e2m1 backend)."""
        ...

    def legality(self, variant: str, target: str) -> str | None:
        """None when `variant` may be rendered for `target`, else the reason it may not."""
        ...

    # A family may also define `config_legality(config, target) -> str | None` for parameters
    # outside the variant that a target cannot run (see `config_legality` below), and
    # `canonical_config(key, config) -> Config`: the config a sample runs as, where a variant
    # fixes some parameters (see `canonical_config` below).

    def xcompile_cases(self) -> Sequence[XCompileCase]: ...

    # -- tuning -------------------------------------------------------------------------------
    def space(self, key: ProblemKey) -> Space: ...

    def default_config(self, key: ProblemKey) -> Config: ...

    def variant_of(self, config: Config) -> str:
        """The variant a config renders (what `legality` is asked about)."""
        ...

    def buckets(self, key: ProblemKey) -> list[Bucket]:
        """The default buckets of this kernel, each an explicit closed range."""
        ...

    def render(self, key: ProblemKey, config: Config) -> Rendered:
        """The generated module a config runs (stored and served by its source hash)."""
        ...

    def make_inputs(self, key: ProblemKey, bucket: Bucket, device: str, seed: int) -> dict[str, Any]: ...

    def run(self, key: ProblemKey, config: Config, inputs: dict[str, Any]) -> Any: ...

    def verify(self, key: ProblemKey, inputs: dict[str, Any], outputs: Any) -> str | None:
        """None when outputs match the reference (FORMATS.md tolerances), else what is wrong."""
        ...

    def bytes_moved(self, key: ProblemKey, bucket: Bucket) -> int:
        """Bytes one launch at the bucket's size must move (the roofline floor's numerator)."""
        ...


# ---------------------------------------------------------------------------------------------
# e2m1 conversion backends, shared by every template that converts e2m1 (see templates/_codecs.py.j2)
# ---------------------------------------------------------------------------------------------

E2M1_BACKENDS: tuple[str, ...] = ("soft", "ptx", "gfx950")
# Decoding only (the cache readers): "lut" looks e2m1 magnitudes up in a byte-permute (PTX prmt)
# table, four nibbles a lookup, and writes fp32 bit patterns (or, for a bf16 dot, bf16 products
# with the scale) directly; it has no encoding side.
E2M1_READ_BACKENDS: tuple[str, ...] = E2M1_BACKENDS + ("lut",)

_E2M1_ILLEGAL: dict[tuple[str, str], str] = {
    ("ptx", "sm_90"): "cvt.rn.satfinite.e2m1x2.f32 needs sm_100a or newer; ptxas rejects it on sm_90",
    ("ptx", "gfx942"): "PTX inline asm on AMDGPU aborts the compiler (unknown asm constraint 'f')",
    ("ptx", "gfx950"): "PTX inline asm on AMDGPU aborts the compiler (unknown asm constraint 'f')",
    ("ptx", "interp"): "Triton's interpreter has no inline asm",
    ("gfx950", "sm_90"): "AMDGPU inline asm cannot be compiled by the NVPTX backend",
    ("gfx950", "sm_100"): "AMDGPU inline asm cannot be compiled by the NVPTX backend",
    ("gfx950", "gfx942"): "v_cvt_scalef32_pk_*fp4* exists only from gfx950 on",
    ("gfx950", "interp"): "Triton's interpreter has no inline asm",
    ("lut", "gfx942"): "its e2m1 lookup is PTX inline asm (prmt)",
    ("lut", "gfx950"): "its e2m1 lookup is PTX inline asm (prmt)",
    ("lut", "interp"): "Triton's interpreter has no inline asm",
}


def e2m1_backend_legality(backend: str, target: str) -> str | None:
    if backend not in E2M1_READ_BACKENDS:
        raise ValueError(f"unknown e2m1 backend {backend!r}; known: {list(E2M1_READ_BACKENDS)}")
    if target not in ("sm_90", "sm_100", "gfx942", "gfx950", "interp"):
        # Architectures without rows of their own: only the portable backend is known to be legal.
        return None if backend == "soft" else f"{backend} is only known legal on its own architecture"
    return _E2M1_ILLEGAL.get((backend, target))


def device_generator(g: torch.Generator, device: str | torch.device) -> torch.Generator:
    """The generator to draw a family's random inputs with on `device`: `g` itself on the CPU (so
    seeds there keep their values), else one on the device seeded from `g`. The bench child
    draws hundreds of input sets per bucket; drawn on the host they took seconds each (1M x 512
    normal samples: 12 s on a 2-core CPU) and timed candidates out."""
    import torch

    dev = torch.device(device)
    if dev.type == "cpu":
        return g
    return torch.Generator(device=dev).manual_seed(int(torch.randint(0, 2**62, (1,), generator=g)))


INTERP_SMS = 4  # the SM count launchers assume off a GPU, so that small tests take their multi-program paths


@lru_cache(maxsize=8)
def _sm_count(device_index: int) -> int:
    import torch

    return torch.cuda.get_device_properties(device_index).multi_processor_count


def sm_count(device: torch.device) -> int:
    """Streaming multiprocessors (compute units) of `device`, for launchers that size their grids
    to the GPU; INTERP_SMS off a GPU."""
    return _sm_count(device.index or 0) if device.type == "cuda" else INTERP_SMS


def config_legality(fam: Any, config: Config, target: str) -> str | None:
    """None when `config` may run on `target`, else why not: its variant's legality, and the
    family's own `config_legality` where it has one (logits: LOADS=descriptor is NVIDIA's)."""
    own = getattr(fam, "config_legality", None)
    return own(config, target) if own is not None else fam.legality(fam.variant_of(config), target)


def canonical_config(family: Any, key: ProblemKey, config: Config) -> Config:
    """The config `config` runs as: the family's `canonical_config(key, config)` where it has one.
    A variant that fixes parameters (logits' `wgmma`) makes every sample of it that differs only
    in those one config, so that a search reaches it at all and never measures it twice."""
    canon = getattr(family, "canonical_config", None)
    return canon(key, config) if canon is not None else config


def modules(family: Any, key: ProblemKey, config: Config) -> list[Rendered]:
    """Every generated module the launches of `config` use, `render(key, config)` first: the
    family's `modules(key, config)` where a launcher also calls kernels of other modules (decode's
    wgmma path merges with the Triton module's decode_combine). A bundle stores all of them, since
    its warmup keys name each kernel's module by hash."""
    own = getattr(family, "modules", None)
    return list(own(key, config)) if own is not None else [family.render(key, config)]


def measured_hash(rs: Sequence[Rendered]) -> str:
    """The content hash a trial's time belongs to, from its config's `modules`: the module's source
    hash, or where the config launches kernels of more than one module, a hash over all of theirs,
    so that a change to any of them (decode's wgmma path: its merge in the Triton module) makes
    stored trials of the config stale. One-module configs keep their source hash as it was."""
    if len(rs) == 1:
        return rs[0].source_hash
    return source_hash("+".join(r.source_hash for r in rs))


def seed_configs(family: Any, key: ProblemKey, target: str) -> list[Config]:
    """Configs a search measures right after the default: the family's `seed_configs(key, target)`
    where it has one (decode on sm_90: its wgmma path, which eight TPE trials over a space of
    thousands may never draw; on the H200 it is the fastest config at every T). None by default."""
    own = getattr(family, "seed_configs", None)
    return list(own(key, target)) if own is not None else []
