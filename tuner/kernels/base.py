"""What a kernel family adds to its catalog spec on a machine that runs it: inputs, the launch, the
check against the reference, cross-compile cases and the warmup probes; and the helpers launchers
share (device generators, SM counts).

`catalog.families.base.FamilySpec` holds what needs no torch (space, legality, buckets, render);
`KernelFamily` extends it, so one object per family answers both, with no optional methods.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Sequence

from catalog.core import Bucket, Config, ProblemKey
from catalog.families.base import FamilySpec
from templates.render import Rendered

if TYPE_CHECKING:
    # Imported inside the functions that use it: every compiler child (tuner.compile) imports this
    # module, and torch would cost each ~3 s of a ~1.5 s compile.
    import torch


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
    # CTAs a cluster (NVIDIA sm_90+: Triton's num_ctas); 1 everywhere but the cluster builds.
    num_ctas: int = 1


class KernelFamily(FamilySpec):
    """A family the tuner can measure. `inputs` is a family-defined dict of tensors (and scalars)
    for one launch at one size; `run` must be capturable in a CUDA graph (no host sync, no
    allocation that changes between replays) and returns the outputs `verify` checks against the
    family's reference."""

    @abstractmethod
    def make_inputs(self, key: ProblemKey, bucket: Bucket, device: str, seed: int) -> dict[str, Any]: ...

    @abstractmethod
    def run(self, key: ProblemKey, config: Config, inputs: dict[str, Any]) -> Any: ...

    @abstractmethod
    def verify(self, key: ProblemKey, inputs: dict[str, Any], outputs: Any) -> str | None:
        """None when outputs match the reference (FORMATS.md tolerances), else what is wrong."""

    @abstractmethod
    def xcompile_cases(self) -> Sequence[XCompileCase]:
        """The variants as the cross-compiler builds them (the legality table's evidence)."""

    def compile_case(self, key: ProblemKey, config: Config) -> XCompileCase | None:
        """The exact compile case of one config, where the family can build it (None: the compiler
        derives one from `xcompile_cases`, see `tuner.compile.candidate_case`)."""
        return None

    # -- warmup probes (tuner/warmup.py) -------------------------------------------------------
    def pool_args(self) -> tuple[frozenset[str], ...]:
        """Kernel pointer parameters that view a KV pool (one group per storage): they can be on
        either side of 2 GiB, which AMD's buffer ops specialise on. None by default."""
        return ()

    # Whether a launch's binary depends on the caches' page size (a constexpr shift): warmup then
    # enumerates the keys of each page size an engine names (TunedKernels' page_sizes).
    page_sized: bool = False

    def probe_inputs(self, key: ProblemKey, bucket: Bucket, device: str, seed: int,
                     page_size: int | None = None) -> dict[str, Any]:
        """Inputs a warmup probe launches with: by default `make_inputs` (a family whose timing
        inputs are large offers cheaper ones of the same argument classes); with `page_size` (a
        `page_sized` family), caches of pages of that many slots instead of the family's."""
        if page_size is not None:
            raise ValueError(f"{type(self).__name__} does not take a page size")
        return self.make_inputs(key, bucket, device, seed)

    def probe_variants(self, inputs: dict[str, Any]) -> list[dict[str, Any]]:
        """The same call with each choice of the optional arguments that selects another binary (a
        constexpr the launcher sets from whether an argument is given): an engine may pass either,
        so a warmup probe launches each. By default only `inputs`."""
        return [inputs]

    def probe_contexts(self, bucket: Bucket, page_size: int | None = None) -> list[int]:
        """The context lengths a warmup probe of `bucket` (on caches of `page_size`, None: the
        family's) must launch at to reach every class of the arguments that vary with it: by
        default the bucket's own."""
        return [bucket.ctx]


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
