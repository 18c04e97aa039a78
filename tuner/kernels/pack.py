"""The pack kernel family: write NVFP4/MXFP4/FP8 records into a paged cache (FORMATS.md "pack"),
and the MXFP4 query quantiser (`quant_query`: the same mxfp4_68 records into a dense query).
The space, legality and render of the family are its catalog spec (`catalog.families.pack`)."""

from __future__ import annotations

from typing import Any, Sequence

import torch
import triton

from catalog.core import Bucket, Config, ProblemKey
from catalog.families.pack import (PACK_PAGE_SIZE, QUERY_FORMATS, PackSpec, backend_legality,  # noqa: F401
                                   backends_of, check_query_format, default_config, is_query_key, nt_pad,
                                   query_space, render_query_variant, render_variant, space, upgrade_config)
from catalog.formats import FORMATS, RecordFormat, get_format, page_bytes
from templates import render as R
from tuner.formats import QUERY_FORMAT, alloc_cache, quantize, quantize_query, read_slots
from tuner.kernels.base import KernelFamily, XCompileCase, device_generator
from tuner.kernels.signature import kernel_signature
from tuner.targets import detect

# Triton's type of each runtime parameter of pack_kernel, by name (its cross-compile signature is
# the kernel's own parameter list typed by these; see tuner.kernels.signature).
ARG_TYPES: dict[str, str] = {
    "xw_ptr": "*i32", "slot_ptr": "*i64", "cache_ptr": "*u8", "cache16_ptr": "*i16",
    "n_tokens": "i32", "stride_w": "i32", "page_size": "i32", "page_bytes": "i64",
    # quant_query_kernel's own
    "val_ptr": "*u8", "scale_ptr": "*u8", "n_rows": "i32",
}


def _checked_config(config: Config | None, f: RecordFormat, query: bool = False) -> Config:
    """The config a launch runs: `config` (a stored one upgraded to today's parameters) or the
    format's default, feasible in the paged or the query space and runnable here."""
    cfg = upgrade_config(config) if config else default_config(f)
    why = (query_space(f) if query else space(f)).infeasible(cfg)
    if why:
        raise ValueError(f"infeasible pack config {cfg.to_json()}: {why}")
    illegal = backend_legality(f, cfg["backend"], detect().name)
    if illegal:
        raise ValueError(f"backend {cfg['backend']} cannot run here: {illegal}")
    return cfg


def page_shift(page_size: int) -> int:
    """log2(page_size) for a power of two, else -1 (pack_kernel's page arithmetic by shifts)."""
    return page_size.bit_length() - 1 if page_size & (page_size - 1) == 0 else -1


def launch_constexprs(cfg: Config, kernel: str, in_bf16: bool = True,
                      page_size: int = PACK_PAGE_SIZE) -> dict[str, Any]:
    """The constexprs a launch of `kernel` (pack_kernel or quant_query_kernel) passes for `cfg`,
    pack_kernel's into a cache of `page_size`-slot pages: one definition for the launchers and
    the compile cases, so a cross-compile or warmup of a config builds the binary its launch runs
    (the blocks loop's stages and the page's shift included)."""
    out = {"BLOCK_T": cfg["BLOCK_T"], "TILES_PER_PROG": cfg["TILES_PER_PROG"], "IN_BF16": in_bf16}
    if kernel == "pack_kernel":
        out |= {"BLOCKS_PER_PROG": cfg["BLOCKS_PER_PROG"], "NUM_STAGES": cfg["num_stages"],
                "PAGE_SHIFT": page_shift(page_size)}
    return out


def _words(x: torch.Tensor) -> torch.Tensor:
    """x's rows as int32 words (a bf16 pair, or one fp32), the way the kernels read them."""
    if x.dtype == torch.bfloat16 and (x.stride(0) % 2 or x.storage_offset() % 2):
        x = x.contiguous()
    return x.view(torch.int32)


def _query_out(t: torch.Tensor | None, shape: tuple[int, ...], like: torch.Tensor, name: str) -> torch.Tensor:
    if t is None:
        return torch.empty(shape, dtype=torch.uint8, device=like.device)
    if t.dtype != torch.uint8 or tuple(t.shape) != shape or not t.is_contiguous() or t.device != like.device:
        raise ValueError(f"{name} must be a contiguous uint8{list(shape)} on {like.device}, got {t.dtype}{list(t.shape)}")
    return t


def quant_query(
    x: torch.Tensor,
    config: Config | None = None,
    values: torch.Tensor | None = None,
    scales: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise a query x[..., 128] (bf16 or fp32; e.g. [T, Hi, 128]) to MXFP4: each row's mxfp4_68
    record as (values uint8[..., 64], scales uint8[..., 4]), byte-exact against
    `tuner.formats.quantize_query`. `values`/`scales` (optional) are written in place."""
    f = check_query_format(QUERY_FORMAT)
    if x.dim() < 1 or x.shape[-1] != f.dims:
        raise ValueError(f"an mxfp4 query has rows of {f.dims} dims: x[..., {f.dims}], got {tuple(x.shape)}")
    if x.dtype not in (torch.bfloat16, torch.float32):
        raise ValueError(f"x must be bf16 or fp32, got {x.dtype}")
    lead = tuple(x.shape[:-1])
    values = _query_out(values, lead + (f.data_bytes,), x, "values")
    scales = _query_out(scales, lead + (f.scale_bytes,), x, "scales")
    cfg = _checked_config(config, f, query=True)
    rows = x.reshape(-1, f.dims)  # a view where the leading dims allow it, else a copy
    if rows.stride(1) != 1:
        rows = rows.contiguous()
    n = rows.shape[0]
    if n == 0:
        return values, scales
    mod = R.load(render_query_variant(f, cfg["backend"]))
    xw = _words(rows)
    grid = (triton.cdiv(n, cfg["BLOCK_T"]), nt_pad(f) // cfg["TILES_PER_PROG"])
    mod.quant_query_kernel[grid](
        xw, values, scales, n, xw.stride(0), **launch_constexprs(cfg, "quant_query_kernel", rows.dtype == torch.bfloat16),
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )
    return values, scales


def pack(
    x: torch.Tensor,
    slot_mapping: torch.Tensor,
    cache: torch.Tensor,
    fmt: str | RecordFormat,
    page_size: int,
    config: Config | None = None,
) -> torch.Tensor:
    """Quantize `x[N, dims]` (bf16 or fp32) and write token i's record into slot `slot_mapping[i]`
    of the paged `cache` (uint8[num_pages, page_bytes]); slot -1 is skipped. Returns `cache`."""
    f = get_format(fmt)
    if x.dim() != 2 or x.shape[1] != f.dims:
        raise ValueError(f"{f.name} packs x[N, {f.dims}], got {tuple(x.shape)}")
    if x.dtype not in (torch.bfloat16, torch.float32):
        raise ValueError(f"x must be bf16 or fp32, got {x.dtype}")
    if x.stride(1) != 1:
        raise ValueError("x must be contiguous along dims")
    if slot_mapping.shape != (x.shape[0],) or slot_mapping.dtype != torch.int64:
        raise ValueError("slot_mapping must be int64[N]")
    pb = page_bytes(f, page_size)
    if cache.dtype != torch.uint8 or cache.dim() != 2 or cache.shape[1] != pb or not cache.is_contiguous():
        raise ValueError(f"cache must be a contiguous uint8[num_pages, {pb}] for {f.name} with page size {page_size}")
    cfg = _checked_config(config, f)
    n = x.shape[0]
    if n == 0:
        return cache
    mod = R.load(render_variant(f, cfg["backend"]))
    in_bf16 = x.dtype == torch.bfloat16
    # The kernel reads x as int32 words (a bf16 pair or one fp32) and writes e4m3 pairs as halfwords.
    xw = _words(x)
    grid = (triton.cdiv(n, cfg["BLOCK_T"] * cfg["BLOCKS_PER_PROG"]), nt_pad(f) // cfg["TILES_PER_PROG"])
    mod.pack_kernel[grid](
        xw, slot_mapping, cache, cache.view(torch.int16), n, xw.stride(0), page_size, pb,
        **launch_constexprs(cfg, "pack_kernel", in_bf16, page_size), num_warps=cfg["num_warps"],
        num_stages=cfg["num_stages"],
    )
    return cache


VERIFY_ROWS = 1 << 16  # records the bench child checks per candidate (benchmarks/bench_pack.py checks all)


def verify_rows(n: int, device: str | torch.device) -> torch.Tensor:
    """The rows of an n-token pack a candidate is checked on: all of them up to VERIFY_ROWS, else
    the first and last 4096 (tile and tail edges) and a fixed random sample of the rest. The
    reference quantizes on the CPU: all of 1M tokens took 46 s on a 2-core CPU, per candidate."""
    if n <= VERIFY_ROWS:
        return torch.arange(n, device=device)
    edge = 4096
    g = torch.Generator().manual_seed(n)
    middle = edge + torch.randperm(n - 2 * edge, generator=g)[: VERIFY_ROWS - 2 * edge]
    rows = torch.cat([torch.arange(edge), middle.sort().values, torch.arange(n - edge, n)])
    return rows.to(device)


def allocator_slots(n: int, page: int, generator: torch.Generator, device: str | torch.device) -> torch.Tensor:
    """The slots a paged allocator gives n new tokens: whole pages in a shuffled order, tokens
    contiguous inside a page, as an engine's block tables place a prefill's tokens. (Each token at
    a random slot of any page, as the tuner drew them until 2026-12-05, no engine writes: each
    record's scale bytes landed alone in a line, and fp8_584's pipelined config measured 526.5 us
    there against 429.8 in bench_pack, which has always used these slots.)"""
    pages = -(-n // page)
    perm = torch.randperm(pages, generator=generator, device=device)
    i = torch.arange(n, device=device)
    return perm[i // page] * page + i % page


def _query_outputs(f: RecordFormat, n: int, device: str) -> dict[str, torch.Tensor]:
    """The query quantiser's two dense outputs for n rows."""
    return {"values": torch.empty(n, f.data_bytes, dtype=torch.uint8, device=device),
            "scales": torch.empty(n, f.scale_bytes, dtype=torch.uint8, device=device)}


class PackFamily(PackSpec, KernelFamily):
    page_sized = True  # pack_kernel's PAGE_SHIFT

    def make_inputs(self, key: ProblemKey, bucket: Bucket, device: str, seed: int) -> dict[str, Any]:
        f = get_format(key.formats[0])
        n = bucket.rep
        g = torch.Generator().manual_seed(seed)
        dg = device_generator(g, device)  # drawn where they are used (a 1M-token set: 12 s on a host CPU)
        x = (torch.randn(n, f.dims, generator=dg, device=device) * 3).to(torch.bfloat16)
        if is_query_key(key):  # n (token, head) rows and the two dense outputs
            return {"x": x, **_query_outputs(f, n, device)}
        pages = -(-n // PACK_PAGE_SIZE)
        return {"x": x, "slots": allocator_slots(n, PACK_PAGE_SIZE, dg, device),
                "cache": alloc_cache(f, pages, PACK_PAGE_SIZE, device=device, fill=0), "page_size": PACK_PAGE_SIZE}

    def probe_inputs(self, key: ProblemKey, bucket: Bucket, device: str, seed: int,
                     page_size: int | None = None) -> dict[str, Any]:
        """A launch's argument classes without its data, for warmup-key enumeration: the sizes,
        dtypes and alignments of `make_inputs` (x never written, one page of cache: a pool's large
        class is added by the enumeration); drawing 1M-token inputs for each probed size of the
        largest bucket took minutes on a CPU."""
        f = get_format(key.formats[0])
        n, page = bucket.rep, page_size or PACK_PAGE_SIZE
        x = torch.empty(n, f.dims, dtype=torch.bfloat16, device=device)
        if is_query_key(key):
            return {"x": x, **_query_outputs(f, n, device)}
        return {"x": x, "slots": torch.zeros(n, dtype=torch.int64, device=device),
                "cache": alloc_cache(f, 1, page, device=device, fill=0), "page_size": page}

    def run(self, key: ProblemKey, config: Config, inputs: dict[str, Any]) -> Any:
        if is_query_key(key):
            return quant_query(inputs["x"], config, inputs["values"], inputs["scales"])
        return pack(inputs["x"], inputs["slots"], inputs["cache"], key.formats[0], inputs["page_size"], config)

    def verify(self, key: ProblemKey, inputs: dict[str, Any], outputs: Any) -> str | None:
        f = get_format(key.formats[0])
        rows = verify_rows(len(inputs["x"]), inputs["x"].device)
        if is_query_key(key):
            got = torch.cat([outputs[0][rows], outputs[1][rows]], dim=1).cpu()
        else:
            got = read_slots(outputs, inputs["slots"][rows], f, inputs["page_size"]).cpu()
        want = quantize(inputs["x"][rows].cpu(), f)
        bad = (got != want).any(dim=1)
        return f"{int(bad.sum())} of {len(bad)} records checked differ from the reference" if bad.any() else None

    def compile_case(self, key: ProblemKey, config: Config) -> XCompileCase | None:
        """The exact case of a config: its kernel (the query quantiser's is not pack_kernel) with
        the constexprs its launch passes (NUM_STAGES follows num_stages, which a case derived by
        parameter name would miss)."""
        kernel = "quant_query_kernel" if is_query_key(key) else "pack_kernel"
        config = upgrade_config(config)
        rendered = self.render(key, config)
        return XCompileCase(
            variant=self.variant_of(config), rendered=rendered, kernel_name=kernel,
            signature=kernel_signature(rendered, kernel, ARG_TYPES), constexprs=launch_constexprs(config, kernel),
            num_warps=config["num_warps"], num_stages=config["num_stages"], detail="+".join(key.formats),
        )

    def pool_args(self) -> tuple[frozenset[str], ...]:
        """Kernel pointer parameters that view a KV pool (one group per storage): they can be on
        either side of 2 GiB, which AMD's buffer ops specialise on."""
        return (frozenset({"cache_ptr", "cache16_ptr"}),)

    def xcompile_cases(self) -> Sequence[XCompileCase]:
        """Each backend on the formats it converts (e2m1 backends on the e2m1 formats, e4m3 ones on
        the fp8 formats); and each backend of the query quantiser (detail "mxfp4_68+query", the
        key's formats joined)."""
        cases = []
        builds = [(name, f, render_variant, "pack_kernel", name) for name, f in FORMATS.items()]
        builds += [(name, FORMATS[name], render_query_variant, "quant_query_kernel", f"{name}+query")
                   for name in QUERY_FORMATS]
        for name, f, render, kernel, detail in builds:
            for backend in backends_of(f):
                cfg = default_config(f)
                rendered = render(f, backend)
                cases.append(
                    XCompileCase(
                        variant=backend,
                        rendered=rendered,
                        kernel_name=kernel,
                        signature=kernel_signature(rendered, kernel, ARG_TYPES),
                        constexprs=launch_constexprs(cfg, kernel),
                        num_warps=cfg["num_warps"],
                        num_stages=cfg["num_stages"],
                        detail=detail,
                    )
                )
        return cases


FAMILY = PackFamily()
