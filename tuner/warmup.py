"""Warmup keys: every compiled binary an engine will need, so it compiles them all at startup and
nothing while it serves.

Triton compiles a new binary whenever a launch hits a new specialisation: a new constexpr, an integer
argument equal to 1 (it becomes a constant) or divisible by 16, a pointer's 16-byte alignment, and on
AMD with buffer ops a `pointer_range=32` flag ('S') for tensors whose whole *storage* is at most
2**31-1 bytes. An engine that warms up with small stand-in tensors compiles the 'S' variant; its real
KV pool is over 2 GiB, so the first real step would compile again, mid-serving.

How the keys are found, without hard-coding Triton's rules:
1. `record_launches` runs a family's real launcher on real (small, CPU) inputs with Triton's launch
   replaced by a recorder, for every size a bucket can take (all residues mod 16, and 1).
2. Each recorded argument is classified by Triton's own `native_specialize_impl` with the target's
   backend class (`CUDABackend` or `HIPBackend`), so the classes are the installed Triton's.
3. Pointer parameters that can point into a KV pool (the family's `pool_args`) get both sides of
   2 GiB: the recorded small class and the class of a stand-in whose storage is over 2 GiB.

`warm(keys)` then compiles each key through `JITFunction.warmup` with stand-in arguments -- meta
tensors that report the right dtype, alignment and storage size, so no memory is touched -- and
`no_compiles()` (Triton's `jit_cache_hook`) proves that serving compiles nothing.
"""

from __future__ import annotations

import contextlib
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

import torch
import triton
from triton.tools.tensor_descriptor import TensorDescriptor

from templates import render as R
from catalog.core import Bucket, Config, ProblemKey

LARGE_STORAGE = 3 << 30  # a stand-in KV pool: past 2**31-1 bytes, where AMD drops the 'S' flag
SMALL_STORAGE = 1 << 12


# ---------------------------------------------------------------------------------------------
# Keys
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArgSpec:
    """One argument as Triton specialises it: `type` is Triton's ('*u8', 'i32', 'constexpr'...),
    `spec` its attribute string ('D' divisible/aligned by 16, 'S' pointer range 32, '' none), or
    for a constexpr its value."""

    name: str
    type: str
    spec: Any

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "spec": self.spec}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> ArgSpec:
        return cls(str(d["name"]), str(d["type"]), d["spec"])


@dataclass(frozen=True)
class WarmupKey:
    """One binary: a kernel function of a generated module, the specialisation of every argument,
    and the launch options exactly as the launcher passes them. Order and presence matter: Triton
    keys its in-memory cache on `str(options)`, so `num_stages=3` passed explicitly and the same
    default left out are two cache entries. `triton` is the version the key was made for."""

    kernel: str  # family
    source_hash: str
    fn: str
    args: tuple[ArgSpec, ...]
    options: tuple[tuple[str, Any], ...]
    target: str
    triton: str = field(default_factory=lambda: triton.__version__)

    @property
    def num_warps(self) -> int:
        return int(dict(self.options).get("num_warps", 4))  # Triton's defaults when not passed

    @property
    def num_stages(self) -> int:
        return int(dict(self.options).get("num_stages", 3))

    def to_json(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel, "source_hash": self.source_hash, "fn": self.fn,
            "args": [a.to_json() for a in self.args], "options": [list(o) for o in self.options],
            "target": self.target, "triton": self.triton,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> WarmupKey:
        return cls(
            kernel=str(d["kernel"]), source_hash=str(d["source_hash"]), fn=str(d["fn"]),
            args=tuple(ArgSpec.from_json(a) for a in d["args"]),
            options=tuple((str(k), v) for k, v in d["options"]), target=str(d["target"]), triton=str(d["triton"]),
        )


# ---------------------------------------------------------------------------------------------
# Recording launches
# ---------------------------------------------------------------------------------------------


@dataclass
class Launch:
    fn: Any  # JITFunction or InterpretedFunction
    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    @property
    def arg_names(self) -> list[str]:
        return list(self.fn.arg_names)

    def bound(self) -> dict[str, Any]:
        """Every parameter by name (positional and keyword), launch options excluded."""
        names = self.arg_names
        out = dict(zip(names, self.args))
        out.update({k: v for k, v in self.kwargs.items() if k in names})
        return out

    @property
    def options(self) -> dict[str, Any]:
        names = set(self.arg_names)
        return {k: v for k, v in self.kwargs.items() if k not in names}


def _jit_classes() -> list[type]:
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    return [JITFunction, InterpretedFunction]


@contextlib.contextmanager
def record_launches() -> Iterator[list[Launch]]:
    """Within the block, Triton kernel launches are recorded instead of run (no device needed)."""
    launches: list[Launch] = []
    saved = []
    for cls in _jit_classes():
        saved.append((cls, cls.__dict__["run"]))

        def run(self, *args, grid, warmup, **kwargs):  # noqa: ANN001 - Triton's signature
            launches.append(Launch(self, args, kwargs))
            return None

        cls.run = run
    try:
        yield launches
    finally:
        for cls, orig in saved:
            cls.run = orig


def _do_not_specialize(fn: Any) -> set[str]:
    raw = getattr(fn, "do_not_specialize", None)
    if raw is None:
        raw = getattr(fn, "kwargs", {}).get("do_not_specialize")
    names = list(fn.arg_names)
    return {names[x] if isinstance(x, int) else str(x) for x in (raw or ())}


def backend_class(target: str) -> type:
    """The installed Triton backend whose specialisation rules apply to `target`."""
    from tuner.targets import get_target

    t = get_target(target)
    if t.backend == "hip":
        from triton.backends.amd.compiler import HIPBackend

        return HIPBackend
    from triton.backends.nvidia.compiler import CUDABackend

    return CUDABackend  # the interpreter compiles nothing; NVIDIA's rules stand in for it


def classify(value: Any, backend: type, specialize: bool = True) -> tuple[str, Any]:
    """Triton's own (type, spec) for one argument value on `backend`."""
    from triton._C.libtriton import native_specialize_impl

    ty, spec = native_specialize_impl(backend, value, False, specialize, True)
    return ty, spec


def stand_in(ty: str, spec: str, large: bool = False) -> torch.Tensor:
    """A meta tensor that Triton specialises as (ty, spec): dtype from the type, alignment from 'D',
    storage size from 'S' (or `large`). Meta tensors allocate nothing."""
    dtype = _TORCH_DTYPES[ty.lstrip("*k")]
    itemsize = torch.empty((), dtype=dtype).element_size()
    size = LARGE_STORAGE if (large or "S" not in spec) else SMALL_STORAGE
    base = torch.empty(size // itemsize + 16, dtype=dtype, device="meta")
    return base if "D" in spec else base[1:]


def stand_in_descriptor(ty: str) -> Any:
    """A tensor descriptor Triton specialises as `ty` ('tensordesc<u8[1, 64, 128]>'): over a meta
    tensor of exactly one block (Triton keys a descriptor by its element type and block shape).
    A Gluon kernel's descriptor also carries its shared-memory layout ('tensordesc<u8[1, 64, 64],
    NVMMASharedLayout(...)>'): the stand-in is a Gluon descriptor with that layout."""
    m = re.fullmatch(r"tensordesc<(\w+)\[([\d, ]+)\](?:,(.+))?>", ty)
    if m is None:
        raise ValueError(f"cannot stand in for a descriptor of type {ty}")
    block = [int(x) for x in m.group(2).split(",")]
    base = torch.empty(block, dtype=_TORCH_DTYPES[m.group(1)], device="meta")
    if m.group(3) is None:
        return TensorDescriptor(base, list(base.shape), list(base.stride()), block)
    from triton.experimental.gluon.language import NVMMASharedLayout
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonDescriptor

    if not m.group(3).startswith("NVMMASharedLayout("):
        raise ValueError(f"cannot stand in for a descriptor of type {ty}")
    layout = eval(m.group(3), {"__builtins__": {}}, {"NVMMASharedLayout": NVMMASharedLayout})  # Triton's own repr
    return GluonDescriptor(base, list(base.shape), list(base.stride()), block, layout)


def _is_descriptor(value: Any) -> bool:
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonDescriptor

    return isinstance(value, (TensorDescriptor, GluonDescriptor))


_TORCH_DTYPES: dict[str, torch.dtype] = {
    "u8": torch.uint8, "i8": torch.int8, "i16": torch.int16, "i32": torch.int32, "i64": torch.int64,
    "fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32, "fp64": torch.float64,
    "fp8e4nv": torch.float8_e4m3fn, "fp8e5": torch.float8_e5m2, "u16": torch.uint16, "u32": torch.uint32,
    "u64": torch.uint64, "i1": torch.bool,
}


def launch_specs(launch: Launch, backend: type, pools: Sequence[frozenset[str]]) -> list[tuple[ArgSpec, ...]]:
    """The specialisations one recorded launch stands for: as recorded, and for each pool (a group
    of pointer parameters that view one KV-pool storage) also as if that storage were over 2 GiB,
    where the backend tells the two apart. Pointers of one pool change class together."""
    nospec = _do_not_specialize(launch.fn)
    consts = _constexpr_names(launch)
    base: list[ArgSpec] = []
    for name, value in launch.bound().items():
        if isinstance(value, torch.Tensor) or _is_descriptor(value):
            ty, spec = classify(value, backend)  # a descriptor: ('tensordesc<u8[1, 64, 128]>', None)
            base.append(ArgSpec(name, ty, spec))
        elif isinstance(value, int) and not isinstance(value, bool) and name not in consts:
            ty, spec = classify(value, backend, specialize=name not in nospec)
            base.append(ArgSpec(name, ty, spec))
        elif isinstance(value, float) and name not in consts:
            base.append(ArgSpec(name, "fp32", ""))  # Triton does not specialise floats
        else:
            base.append(ArgSpec(name, "constexpr", _plain(value)))
    variants = [tuple(base)]
    for pool in pools:
        present = [i for i, a in enumerate(base) if a.name in pool and a.type.startswith("*")]
        if not present:
            continue
        grown = []
        for v in variants:
            big = list(v)
            for i in present:
                a = v[i]
                big[i] = ArgSpec(a.name, a.type, classify(stand_in(a.type, "D" if "D" in a.spec else "", large=True), backend)[1])
            grown.append(tuple(big))
        variants = list(dict.fromkeys(variants + grown))
    return variants


def _constexpr_names(launch: Launch) -> set[str]:
    fn = launch.fn
    params = getattr(fn, "params", None)
    if params is not None:
        return {p.name for p in params if p.is_constexpr}
    import inspect

    sig = inspect.signature(fn.fn)
    return {n for n, p in sig.parameters.items() if "constexpr" in str(p.annotation)}


def _plain(v: Any) -> Any:
    if isinstance(v, (bool, int, float, str)) or v is None:
        return v
    return str(v)


def sizes_to_probe(bucket: Bucket) -> list[int]:
    """Sizes whose launches cover every specialisation class a bucket can reach: an integer that
    is affine in the size is classified by its residue mod 16 and by being 1, so the first and last
    32 sizes of the range (all of it when it is short) reach every class."""
    lo, hi = bucket.lo, bucket.hi
    if hi - lo < 64:
        return list(range(lo, hi + 1))
    return sorted(set(range(lo, lo + 32)) | set(range(hi - 31, hi + 1)))


# ---------------------------------------------------------------------------------------------
# Enumerating the keys of a bundle
# ---------------------------------------------------------------------------------------------


def keys_for(
    family_name: str,
    key: ProblemKey,
    config: Config,
    bucket: Bucket,
    target: str,
    make_inputs: Callable[[int], dict[str, Any]] | None = None,
    device: str = "cpu",
    page_size: int | None = None,
) -> list[WarmupKey]:
    """Every warmup key one (kernel, config, bucket) hits on `target` (with `page_size`, launched
    on caches of that page size: a `page_sized` family's binaries depend on it).

    `make_inputs(n)` builds inputs for size n; by default the family's `probe_inputs` (cheap,
    launch-identical inputs; else its `make_inputs`) for a one-size bucket on `device`. Probed:
    every size class of the bucket's dimension, and, where the family names them
    (`probe_contexts(bucket)`: logits), the contexts that reach every class of the arguments that
    follow the context length, since an engine's longest context varies below the bucket's (with
    `make_inputs` given, only the sizes), each with every choice of optional arguments that
    selects another binary (`probe_variants`: decode with and without sinks). Pool pointers get
    their large class added by `launch_specs`. Kernels are recorded, never run, so `device` may be a GPU of the target's model:
    launchers that size launches from the device (e.g. by its SM count) must be recorded on one.
    """
    from tuner.kernels import get_family

    fam = get_family(family_name)
    backend = backend_class(target)
    pools = fam.pool_args()
    rendered = fam.render(key, config)
    out: dict[tuple, WarmupKey] = {}
    contexts = [bucket.ctx] if make_inputs else fam.probe_contexts(bucket, page_size)
    for ctx, n in ((c, n) for c in contexts for n in sizes_to_probe(bucket)):
        inputs = make_inputs(n) if make_inputs else fam.probe_inputs(key, Bucket(bucket.dim, n, n, ctx), device, seed=n,
                                                                     page_size=page_size)
        with record_launches() as launches:
            for variant in fam.probe_variants(inputs):
                fam.run(key, config, variant)
        if not launches:
            raise RuntimeError(f"{family_name}: running config {config.to_json()} launched no Triton kernel")
        for la in launches:
            opts = la.options
            for specs in launch_specs(la, backend, pools):
                wk = WarmupKey(
                    kernel=family_name, source_hash=_source_hash_of(la.fn, rendered), fn=la.fn.fn.__name__,
                    args=specs, options=tuple((k, _plain(v)) for k, v in opts.items()), target=target,
                )
                out[(wk.fn, wk.source_hash, wk.args, wk.options)] = wk
    return list(out.values())


def _source_hash_of(fn: Any, rendered: R.Rendered) -> str:
    """The content hash of the generated module a launched kernel lives in: templates.render names each
    module `kvtune_<template>_<hash>` (a launcher may call kernels of a module other than the
    family's render of this config; then the name says which)."""
    mod_name = getattr(getattr(fn, "fn", None), "__module__", "")
    return mod_name.rsplit("_", 1)[-1] if mod_name.startswith("kvtune_") else rendered.source_hash


# ---------------------------------------------------------------------------------------------
# Warming and the no-compile guard
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class WarmReport:
    keys: int
    compiled: int
    seconds: float
    skipped: tuple[str, ...] = ()
    # Keys that could not be warmed ("fn@hash: why"): a missing source, a key whose arguments the
    # kernel does not take. Reported, not raised: an engine still starts, and such a launch compiles
    # on first use (which `no_compiles` would catch).
    failed: tuple[str, ...] = ()


def _stand_in_value(a: ArgSpec) -> Any:
    if a.type == "constexpr":
        return a.spec
    if a.type.startswith("tensordesc<"):
        return stand_in_descriptor(a.type)
    if a.type.startswith("*"):
        return stand_in(a.type, a.spec)
    if a.type in ("i32", "u32", "i64", "u64"):
        base = 1 << 33 if a.type in ("i64", "u64") else 0  # a 64-bit int must not fit in 32 bits
        return base + (16 if a.spec == "D" else 17)
    if a.type.startswith("fp"):
        return 1.5
    raise ValueError(f"cannot stand in for argument {a.name} of type {a.type}")


def warm(keys: Sequence[WarmupKey], sources: Mapping[str, str]) -> WarmReport:
    """Compile every key through `JITFunction.warmup` on the current device. `sources` maps source
    hashes to generated module text (the bundle's kernels, fetched by hash or rendered locally).
    Keys made for another Triton version are compiled anyway but reported as skipped-stale; keys
    that cannot be compiled are reported as failed (`WarmReport.failed`), and the rest still warm."""
    t0 = time.perf_counter()
    stale: list[str] = []
    failed: list[str] = []
    with count_compiles() as seen:
        for k in keys:
            if k.triton != triton.__version__:
                stale.append(f"{k.fn}@{k.source_hash}: made for triton {k.triton}")
            src = sources.get(k.source_hash)
            if src is None:
                failed.append(f"{k.fn}@{k.source_hash}: no source (kernel {k.kernel})")
                continue
            try:
                fn = getattr(R.load(R.Rendered(f"{k.kernel}.py.j2", src)), k.fn)
                # By name: an int that specialised to the constant 1 is a constexpr here, not a positional.
                # Options exactly as the launcher passed them (see WarmupKey).
                bound = {a.name: _stand_in_value(a) for a in k.args}
                fn.warmup(grid=(1,), **bound, **dict(k.options))
            except Exception as e:  # one bad key (a corrupt or foreign bundle) must not stop the rest
                failed.append(f"{k.fn}@{k.source_hash}: {type(e).__name__}: {str(e)[:200]}")
        compiled = len(seen)
    return WarmReport(keys=len(keys), compiled=compiled, seconds=time.perf_counter() - t0, skipped=tuple(stale),
                      failed=tuple(failed))


@contextlib.contextmanager
def count_compiles() -> Iterator[list[str]]:
    """Within the block, every Triton JIT compile is appended (as 'module.fn[key]') to the list."""
    from triton import knobs

    seen: list[str] = []
    prev = knobs.runtime.jit_cache_hook

    def hook(*args: Any, **kwargs: Any) -> bool:
        # Triton calls it as hook(key=, repr=, fn=JitFunctionInfo, compile=, is_manual_warmup=, ...)
        seen.append(str(kwargs.get("repr", kwargs.get("key", "?"))))
        if prev is not None:
            return bool(prev(*args, **kwargs))
        return False  # False: go on and compile

    knobs.runtime.jit_cache_hook = hook
    try:
        yield seen
    finally:
        knobs.runtime.jit_cache_hook = prev


class CompiledWhileServing(RuntimeError):
    pass


@contextlib.contextmanager
def no_compiles() -> Iterator[list[str]]:
    """Raises `CompiledWhileServing` at exit if any Triton kernel compiled inside the block."""
    with count_compiles() as seen:
        yield seen
    if seen:
        raise CompiledWhileServing(f"{len(seen)} compile(s) while serving, first: {seen[0][:3000]}")


def compile_key(key: WarmupKey, source: str, target: str | None = None) -> Any:
    """Cross-compile one key for `target` (default: the key's) with exactly its specialisation --
    no device needed. Must run without TRITON_INTERPRET (the module's kernels must be JITFunctions)."""
    from tuner.compile import ast_source
    from tuner.targets import get_target, gpu_target

    tname = target or key.target
    backend = backend_class(tname)
    mod = R.load(R.Rendered(f"{key.kernel}.py.j2", source))
    fn = getattr(mod, key.fn)
    names = list(fn.arg_names)
    signature = {a.name: a.type for a in key.args}
    constexprs = {a.name: a.spec for a in key.args if a.type == "constexpr"}
    attrs = {(names.index(a.name),): backend.parse_attr(a.spec) for a in key.args
             if a.type != "constexpr" and isinstance(a.spec, str) and a.spec}
    src = ast_source(fn, signature, constexprs, attrs)
    return triton.compile(src, target=gpu_target(get_target(tname)),
                          options={"num_warps": key.num_warps, "num_stages": key.num_stages})
