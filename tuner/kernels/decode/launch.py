"""The decode launcher: argument checks, how a token's programs cover its two key lists (the split
plan), and the launches of decode_kernel, the wgmma path's decode_wgmma_kernel (or its heads-on-M
build, decode_wgmma_hm_kernel) and the merge, decode_combine. Inputs, verification and
cross-compile cases live beside it (`inputs`, `xcompile`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import torch
import triton

from catalog.codecs import e2m1_backend_legality
from catalog.core import Config
from catalog.families.decode import (AUTO, MAX_HEADS, MAX_SPLITS, WGMMA_MAX_HEADS, _fmt512, config_constexprs,
                                     has_e2m1, render_variant, render_wgmma, space)
from catalog.families.decode_wgmma import (WGMMA_BLOCK_N, WGMMA_CLUSTER_CTAS, WGMMA_CLUSTER_MMAS, WGMMA_HM_HEADS,
                                           WGMMA_HM_MMAS, WGMMA_ILLEGAL, WGMMA_MERGE_BACKEND, WGMMA_PREFETCH_MMAS,
                                           WGMMA_MERGE_MMAS, WGMMA_SHARE_MMAS, WGMMA_TWO_PARTIAL_MMAS, is_wgmma,
                                           wgmma_heads, wgmma_legality)
from catalog.formats import RecordFormat, page_bytes
from templates import render as R
from tuner.kernels.base import sm_count
from tuner.kernels.decode.buffers import merge_counters, merge_fits, shared_tiles
from tuner.kernels.decode.cluster import check_once, cluster_module
from tuner.targets import detect, interpreting

COMBINE_HEADS = 16  # heads a decode_combine program merges (grid axis 2 takes the rest)
COMBINE_ELEMS = 2048  # fp32 partial values a combine program aims to load at once (16 per thread at 4 warps)
COMBINE_MIN_D = 16  # ...but no narrower slice than this, except to cover the SMs (combine_tile)


@lru_cache(maxsize=16)
def _wgmma_module(comp: str, win: str) -> Any:
    return R.load(render_wgmma(comp, win))


@lru_cache(maxsize=64)
def _module(comp: str, win: str, backend: str) -> Any:
    # Rendering costs milliseconds of host time: once per variant per process, not per launch.
    return R.load(render_variant(comp, win, backend))


# ---------------------------------------------------------------------------------------------
# Split plans
# ---------------------------------------------------------------------------------------------


def _pow2_floor(n: int) -> int:
    return 1 << (max(1, n).bit_length() - 1)


@dataclass(frozen=True)
class SplitPlan:
    """How a token's programs (grid axis 1; of two launches with `separate`) cover its two key lists."""

    programs: int  # programs per token (grid axis 1); each writes a partial when there are several
    comp_splits: int  # apart: programs [0, comp_splits) walk the compressed list, the others the window
    comp_chunk: int  # keys of the compressed list per program
    win_chunk: int  # keys of the window list per program
    apart: bool
    separate: bool = False  # apart, as one launch per list

    @property
    def partial(self) -> bool:
        return self.programs > 1


def _apart_plan(splits: int, topk: int, window: int, block_n: int, separate: bool = False) -> SplitPlan:
    # One chunk size for both lists, so that every program walks about the same number of keys:
    # the compressed list's share per split rounded up to whole BLOCK_N blocks (no half-masked
    # gather rounds; it can only lower the program count), and the window list cut into chunks of
    # that same size. The seed shape (topk 512, window 128, BLOCK_N 32): NUM_SPLITS 1 -> 1 + 1
    # programs (512 and 128 keys), 4 -> 4 + 1 (128 keys each), 16 -> 16 + 4 (32 keys, one gather
    # round each). With window <= topk there are at most 2 * NUM_SPLITS programs.
    chunk = triton.cdiv(triton.cdiv(topk, splits), block_n) * block_n
    comp, win = triton.cdiv(topk, chunk), triton.cdiv(window, chunk)
    return SplitPlan(programs=comp + win, comp_splits=comp, comp_chunk=chunk, win_chunk=chunk, apart=True,
                     separate=separate)


def resolve_splits(cfg: Config, n_tokens: int, topk: int, device: torch.device, window: int | None = None) -> int:
    """The split count of the compressed list a launch uses: the config's, or for AUTO enough
    programs to cover the SMs once (one program per token per split), never splitting the
    compressed list below one block. With LISTS=apart (and `window` given) AUTO then halves the
    count while the window list's programs, which come on top, would take the grid past one wave."""
    s = int(cfg["NUM_SPLITS"])
    if s != AUTO:
        return s
    sms = sm_count(device)
    cap = max(1, _pow2_floor(topk // cfg["BLOCK_N"]))
    s = max(1, min(16, cap, _pow2_floor(sms // max(1, n_tokens))))
    if cfg.get("LISTS") in ("apart", "separate") and window is not None:
        while s > 1 and n_tokens * _apart_plan(s, topk, window, cfg["BLOCK_N"]).programs > sms:
            s //= 2
    return s


def split_plan(cfg: Config, n_tokens: int, topk: int, window: int, device: torch.device) -> SplitPlan:
    """Grid axis 1 of a launch. LISTS=both: `resolve_splits` programs, each over a 1/S share of
    both lists (today's kernel). LISTS=apart and separate: see `_apart_plan` (always at least two
    programs; separate launches the compressed list's programs, then the window list's)."""
    s = resolve_splits(cfg, n_tokens, topk, device, window)
    if cfg.get("LISTS", "both") in ("apart", "separate"):
        return _apart_plan(s, topk, window, int(cfg["BLOCK_N"]), separate=cfg["LISTS"] == "separate")
    return SplitPlan(programs=s, comp_splits=s, comp_chunk=triton.cdiv(topk, s), win_chunk=triton.cdiv(window, s),
                     apart=False)


def max_partials(topk: int, window: int, max_splits: int = MAX_SPLITS) -> int:
    """The most partials per token a launch with NUM_SPLITS <= max_splits writes, any LISTS and
    BLOCK_N (a larger BLOCK_N or fewer splits only make chunks longer, hence fewer programs)."""
    return max(max_splits, _apart_plan(max_splits, topk, window, 1).programs)


def workspace_numel(n_tokens: int, heads: int, splits: int) -> int:
    """fp32 elements of scratch a launch with `splits` partials per token (`SplitPlan.programs`;
    the split count for LISTS=both) needs: partial outputs, then (max, sum) pairs."""
    return n_tokens * splits * heads * (512 + 2)


def wgmma_plan(cfg: Config, n_tokens: int, topk: int, window: int, device: torch.device,
               head_groups: int = 1) -> tuple[int, int]:
    """(programs per token and head group, key tiles per program) of the wgmma path: a token's
    64-key tiles (the compressed list's, then the window list's) in contiguous shares. NUM_SPLITS
    asks for that many shares (fewer where shares would be empty); AUTO for about one program an
    SM, so that a small batch runs one tile a program (fastest at T <= 8). One program an SM is all
    that fits with a program's records staged in shared memory (184 KiB), and two an SM did not
    finish a token sooner (benchmarks/results/decode_wgmma.md, decode_cp_async.md)."""
    tiles = triton.cdiv(topk, WGMMA_BLOCK_N) + triton.cdiv(window, WGMMA_BLOCK_N)
    s = int(cfg["NUM_SPLITS"])
    if s == AUTO:
        s = max(1, sm_count(device) // max(1, n_tokens * head_groups))
    per = triton.cdiv(tiles, max(1, min(s, tiles)))
    if cfg["MMA"] in WGMMA_TWO_PARTIAL_MMAS:
        # Two tiles a program at least (one per consumer warpgroup), and two partials a program
        # within MAX_SPLITS.
        per = max(per, 2, triton.cdiv(tiles, MAX_SPLITS // 2))
    return triton.cdiv(tiles, per), per


def combine_tile(block_s: int, block_h: int, n_tok: int = 0, sms: int = 0) -> tuple[int, int]:
    """(BLOCK_D, num_warps) of decode_combine: each program loads all [block_s, block_h, BLOCK_D]
    partials in one block, about COMBINE_ELEMS of them (64 dims at 2 splits x 16 heads, 16 from 5
    splits up: BLOCK_S 8), and takes more warps past 8192 so no thread holds more than 64 of them.
    With fewer than `sms` programs that way (`n_tok` blocks of tokens and heads, 512 / BLOCK_D
    programs each), the slices narrow down to 4 dims until the merge covers the SMs: a small batch's merge
    is latency, one program per SM with a few warps each cannot hide it.
    Measured on the H200 (benchmarks/results/merge_in_kernel/combine_sweep_h200.md, every tile at
    T 1-64 x 16-128 heads x 2-16 partials): 16 dims at 5-16 partials was the fastest tile nearly
    everywhere; 8192 values a program (64 dims at 5 partials) took 2-2.4x as long (64 heads T=8:
    7.78 against 3.86 us). The block is sized by the launch's split count, not by the most any
    launch has: a block of MAX_SPLITS for every launch made a 2-split merge of 64 tokens 3x slower
    (benchmarks/results/decode_breakdown_loop_combine.md against decode_breakdown.md)."""
    block_d = min(64, max(COMBINE_MIN_D, COMBINE_ELEMS // (block_s * block_h)))
    while block_d > 4 and n_tok * (512 // block_d) < sms:
        block_d //= 2
    warps = max(4, min(16, block_s * block_h * block_d // (64 * 32)))
    return block_d, warps


# ---------------------------------------------------------------------------------------------
# Argument checks
# ---------------------------------------------------------------------------------------------


def _check_cache(name: str, cache: torch.Tensor, f: RecordFormat, page_size: int) -> None:
    if not isinstance(page_size, int) or page_size < 1:
        raise ValueError(f"{name} page size must be a positive int, got {page_size!r}")
    pb = page_bytes(f, page_size)
    if pb >= 2**31:  # the kernels address a record inside its page in 32 bits
        raise ValueError(f"{name} pages of {page_size} records are {pb} bytes: a page must stay under 2 GiB")
    if cache.dtype != torch.uint8 or cache.dim() != 2 or cache.shape[1] != pb or not cache.is_contiguous():
        raise ValueError(f"{name} must be a contiguous uint8[num_pages, {pb}] for {f.name} with page size {page_size}, "
                         f"got {cache.dtype}{tuple(cache.shape)}")


def _check_idx(name: str, idx: torch.Tensor, n_tokens: int) -> None:
    if idx.dtype != torch.int32 or idx.dim() != 2 or idx.shape[0] != n_tokens:
        raise ValueError(f"{name} must be int32[T={n_tokens}, n], got {idx.dtype}{tuple(idx.shape)}")
    if idx.shape[1] < 1:
        raise ValueError(f"{name} must list at least one slot per token (use -1 for none)")
    if idx.stride(1) != 1:
        raise ValueError(f"{name} must be contiguous along its last dim")


def _check_inputs(q: torch.Tensor, comp_cache: torch.Tensor, cf: RecordFormat, topk_idx: torch.Tensor,
                  win_cache: torch.Tensor, wf: RecordFormat, window_idx: torch.Tensor, page_size: int, wps: int,
                  sm_scale: float, attn_sink: torch.Tensor | None) -> tuple[int, int]:
    """(T, heads) of a decode call whose inputs are as `decode` takes them; else ValueError."""
    if q.dim() != 3 or q.shape[2] != 512 or q.dtype != torch.bfloat16 or q.stride(2) != 1:
        raise ValueError(f"q must be bf16[T, H, 512] with unit stride along dims, got {q.dtype}{tuple(q.shape)}")
    n_tok, heads = q.shape[0], q.shape[1]
    if not 1 <= heads <= WGMMA_MAX_HEADS:
        raise ValueError(f"heads must be in 1..{WGMMA_MAX_HEADS} (past {MAX_HEADS} on the wgmma path only), got {heads}")
    _check_cache("comp_cache", comp_cache, cf, page_size)
    _check_cache("win_cache", win_cache, wf, wps)
    _check_idx("topk_idx", topk_idx, n_tok)
    _check_idx("window_idx", window_idx, n_tok)
    if not math.isfinite(float(sm_scale)):
        raise ValueError(f"sm_scale must be finite, got {sm_scale}")
    if attn_sink is not None and (attn_sink.dtype != torch.float32 or attn_sink.shape != (heads,) or not attn_sink.is_contiguous()):
        raise ValueError(f"attn_sink must be a contiguous fp32[H={heads}], got {attn_sink.dtype}{tuple(attn_sink.shape)}")
    tensors = [q, comp_cache, topk_idx, win_cache, window_idx] + ([attn_sink] if attn_sink is not None else [])
    if len({t.device for t in tensors}) != 1:
        raise ValueError(f"all tensors must be on one device, got {sorted({str(t.device) for t in tensors})}")
    return n_tok, heads


def _checked_config(config: Config | None, cf: RecordFormat, wf: RecordFormat, heads: int) -> Config:
    """The config a launch runs: `config` or the pair's default at `heads`, feasible and runnable here
    (`space` refuses more heads than the Triton tile takes for records the wgmma path cannot read)."""
    sp = space(cf, wf, heads)
    cfg = config or sp.default()
    # Configs tuned before the LISTS, COMBINE and PREFETCH axes existed meant what their defaults do.
    cfg = Config.from_dict({"LISTS": "both", "COMBINE": "kernel", "PREFETCH": 0, **cfg.as_dict()})
    why = sp.infeasible(cfg)
    if why:
        raise ValueError(f"infeasible decode config {cfg.to_json()}: {why}")
    if has_e2m1(cf, wf):
        illegal = e2m1_backend_legality(cfg["backend"], detect().name)
        if illegal:
            raise ValueError(f"backend {cfg['backend']} cannot run here: {illegal}")
    return cfg


def _outputs(out: tuple[torch.Tensor, torch.Tensor] | None, n_tok: int, heads: int,
             device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    o, lse = out if out is not None else (
        torch.empty(n_tok, heads, 512, dtype=torch.bfloat16, device=device),
        torch.empty(n_tok, heads, dtype=torch.float32, device=device),
    )
    if o.shape != (n_tok, heads, 512) or o.dtype != torch.bfloat16 or not o.is_contiguous():
        raise ValueError("out[0] must be a contiguous bf16[T, H, 512]")
    if lse.shape != (n_tok, heads) or lse.dtype != torch.float32 or not lse.is_contiguous():
        raise ValueError("out[1] must be a contiguous fp32[T, H]")
    return o, lse


def _check_counters(counters: torch.Tensor | None, n_tok: int, device: torch.device) -> None:
    if counters is not None and (counters.dtype != torch.int32 or not counters.is_contiguous()
                                 or counters.numel() < n_tok or counters.device != device):
        raise ValueError(f"counters must be a contiguous int32 tensor of at least T={n_tok} elements on {device}")


def _partials(workspace: torch.Tensor | None, n_tok: int, heads: int, parts: int,
              device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The workspace's partial outputs and (max, sum) pairs for `parts` programs a token (one
    program writes no partials and needs no workspace), allocated when the caller passed none."""
    need = workspace_numel(n_tok, heads, parts) if parts > 1 else 0
    if workspace is None:
        workspace = torch.empty(max(need, 1), dtype=torch.float32, device=device)
    elif workspace.dtype != torch.float32 or not workspace.is_contiguous() or workspace.numel() < need:
        raise ValueError(f"workspace must be a contiguous fp32 tensor of at least {need} elements")
    return workspace[: n_tok * parts * heads * 512], workspace[n_tok * parts * heads * 512 :]


# ---------------------------------------------------------------------------------------------
# Launches
# ---------------------------------------------------------------------------------------------


def decode(
    q: torch.Tensor,
    comp_cache: torch.Tensor,
    comp_fmt: str | RecordFormat,
    topk_idx: torch.Tensor,
    win_cache: torch.Tensor,
    win_fmt: str | RecordFormat,
    window_idx: torch.Tensor,
    page_size: int,
    sm_scale: float,
    attn_sink: torch.Tensor | None = None,
    config: Config | None = None,
    win_page_size: int | None = None,
    out: tuple[torch.Tensor, torch.Tensor] | None = None,
    workspace: torch.Tensor | None = None,
    counters: torch.Tensor | None = None,
    topk_lens: torch.Tensor | None = None,
    window_lens: torch.Tensor | None = None,
    seq_tokens: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sparse MQA decode: `q[T, H, 512]` bf16 over the `topk_idx` slots of the compressed cache and
    the `window_idx` slots of the window cache (int32, -1 = none). Returns `(o[T, H, 512] bf16,
    lse[T, H] fp32)`. `out` (o, lse), `workspace` (flat fp32, `workspace_numel` elements for the
    launch's `split_plan(...).programs` partials; `max_partials` bounds them) and `counters` (int32,
    at least T elements, zero-initialised once by the caller: used by COMBINE=fused, and left zero by
    every completed launch) may be preallocated so that a launch allocates nothing (CUDA-graph
    capture). Without `counters` a fused launch allocates zeroed ones itself.
    `topk_lens` / `window_lens` (int32[T / seq_tokens], one a sequence of `seq_tokens` query
    tokens; FlashMLA's topk_length): each token reads only the first len slots of its list. The
    Triton kernels bound their key loop there on the device; the wgmma kernel has no bound of its
    own yet, so for it the lists are masked to -1 past the length (one device op a list)."""
    cf, wf = _fmt512(comp_fmt), _fmt512(win_fmt)
    wps = page_size if win_page_size is None else win_page_size
    n_tok, heads = _check_inputs(q, comp_cache, cf, topk_idx, win_cache, wf, window_idx, page_size, wps, sm_scale,
                                 attn_sink)
    lens = _checked_lengths(topk_lens, window_lens, seq_tokens, n_tok, q.device)
    cfg = _checked_config(config, cf, wf, heads)
    o, lse = _outputs(out, n_tok, heads, q.device)
    _check_counters(counters, n_tok, q.device)
    if n_tok == 0:
        return o, lse
    if is_wgmma(cfg):
        topk_idx, window_idx = _masked(topk_idx, topk_lens, seq_tokens), _masked(window_idx, window_lens, seq_tokens)
        _decode_wgmma(q, comp_cache, cf, topk_idx, win_cache, wf, window_idx, page_size, wps, sm_scale, attn_sink, cfg,
                      o, lse, workspace)
    else:
        _decode_triton(q, comp_cache, cf, topk_idx, win_cache, wf, window_idx, page_size, wps, sm_scale, attn_sink, cfg,
                       o, lse, workspace, counters, lens)
    return o, lse


# (compressed lengths, window lengths, their divisors): a stand-in pointer and divisor 0 for a list
# without lengths (the kernel then reads the whole list).
Lengths = tuple[torch.Tensor | None, torch.Tensor | None, int]


def _checked_lengths(topk_lens: torch.Tensor | None, window_lens: torch.Tensor | None, seq_tokens: int, n_tok: int,
                     device: torch.device) -> Lengths:
    if seq_tokens < 1 or (n_tok and n_tok % seq_tokens):
        raise ValueError(f"seq_tokens must divide T={n_tok} (query tokens a sequence), got {seq_tokens}")
    for name, t in (("topk_lens", topk_lens), ("window_lens", window_lens)):
        if t is not None and (t.dtype != torch.int32 or t.dim() != 1 or t.numel() < n_tok // seq_tokens
                              or t.device != device or t.stride(0) != 1):
            raise ValueError(f"{name} must be a contiguous int32[B={n_tok // seq_tokens}] on {device}, "
                             f"got {t.dtype}{tuple(t.shape)} on {t.device}")
    return topk_lens, window_lens, seq_tokens


def _masked(idx: torch.Tensor, lens: torch.Tensor | None, seq_tokens: int) -> torch.Tensor:
    """`idx` with the slots past each token's length set to -1 (a tensor of the call's own)."""
    if lens is None:
        return idx
    pos = torch.arange(idx.shape[1], dtype=torch.int32, device=idx.device)
    b = idx.shape[0] // seq_tokens
    per_token = lens[:b].repeat_interleave(seq_tokens) if seq_tokens > 1 else lens[:b]
    return torch.where(pos[None, :] < per_token[:, None], idx, -1)


def _decode_triton(q: torch.Tensor, comp_cache: torch.Tensor, cf: RecordFormat, topk_idx: torch.Tensor,
                   win_cache: torch.Tensor, wf: RecordFormat, window_idx: torch.Tensor, page_size: int, wps: int,
                   sm_scale: float, attn_sink: torch.Tensor | None, cfg: Config, o: torch.Tensor, lse: torch.Tensor,
                   workspace: torch.Tensor | None, counters: torch.Tensor | None, lens: Lengths) -> None:
    """`decode` by decode_kernel (arguments already checked there), merged by decode_combine or
    in the kernel (COMBINE=fused) where a token has more than one program."""
    n_tok, heads = q.shape[0], q.shape[1]
    topk, window = topk_idx.shape[1], window_idx.shape[1]
    plan = split_plan(cfg, n_tok, topk, window, q.device)
    parts = plan.programs
    part_o, part_ml = _partials(workspace, n_tok, heads, parts, q.device)
    fused = plan.partial and cfg["COMBINE"] == "fused"
    if fused and counters is None:
        counters = torch.zeros(n_tok, dtype=torch.int32, device=q.device)
    # Without a fused merge the counters are never touched: any int32 tensor keeps the signature.
    cnt = counters if fused else topk_idx

    mod = _module(cf.name, wf.name, cfg["backend"])
    # Chunks are runtime ints on a GPU (one binary for every split count); see STATIC_TRIPS.
    static = interpreting()
    # The merges load every partial's (max, sum) in one [BLOCK_S, heads] block: a fixed size so
    # that the split count stays a runtime int (LISTS=apart can exceed MAX_SPLITS partials).
    block_s = max(MAX_SPLITS, triton.next_power_of_2(parts))
    block_h = max(16, triton.next_power_of_2(heads))
    sink = attn_sink if attn_sink is not None else lse  # never read without HAS_SINK
    # A list without lengths: divisor 0, and any int32 tensor of at least T elements as its pointer.
    comp_lens, win_lens, seq_tokens = lens
    c_len, c_div = (comp_lens, seq_tokens) if comp_lens is not None else (topk_idx, 0)
    w_len, w_div = (win_lens, seq_tokens) if win_lens is not None else (window_idx, 0)
    # One launch over every program of a token, or (LISTS=separate) one per list: the compressed
    # list's comp_splits programs, then the window list's, whose partials follow.
    launches = ([(1, plan.comp_splits), (2, parts - plan.comp_splits)] if plan.separate else [(0, parts)])
    for only, programs in launches:
        mod.decode_kernel[(n_tok, programs)](
            q, comp_cache, topk_idx, win_cache, window_idx, sink, o, lse, part_o, part_ml, cnt, c_len, w_len,
            heads, topk, window, page_size, page_bytes(cf, page_size), wps, page_bytes(wf, wps),
            q.stride(0), q.stride(1), topk_idx.stride(0), window_idx.stride(0),
            plan.comp_chunk, plan.win_chunk, plan.comp_splits if plan.apart else 0, float(sm_scale) * math.log2(math.e),
            c_div, w_div, BLOCK_H=block_h, BLOCK_S=block_s if fused else MAX_SPLITS, STATIC_TRIPS=static,
            COMP_CHUNK=plan.comp_chunk if static else 0, WIN_CHUNK=plan.win_chunk if static else 0,
            N_PARTS=parts if static and fused else 0, SPLIT=plan.partial, APART=plan.apart, ONLY=only, FUSED=fused,
            HAS_SINK=attn_sink is not None, UPCAST=interpreting(), **config_constexprs(cfg),
            num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
        )
    if plan.partial and not fused:
        launch_combine(mod, part_o, part_ml, sink, o, lse, parts, attn_sink is not None)


def _pow2_shift(n: int) -> int:
    """log2(n) for a power of two, else -1 (the wgmma kernel's page arithmetic by shifts)."""
    return n.bit_length() - 1 if n & (n - 1) == 0 else -1


def wgmma_program_heads(cfg: Config, heads: int, cf: str | RecordFormat, wf: str | RecordFormat) -> int:
    """Heads a program of the wgmma path's build `cfg` takes (its HB) in a launch of `heads`: 64 on
    the heads-on-M builds' M, else `wgmma_heads`' 16 or 32 on N; the launch runs ceil(heads / HB)
    groups."""
    return WGMMA_HM_HEADS if cfg["MMA"] in WGMMA_HM_MMAS else wgmma_heads(cfg, heads, cf, wf)


def _decode_wgmma(q: torch.Tensor, comp_cache: torch.Tensor, cf: RecordFormat, topk_idx: torch.Tensor,
                  win_cache: torch.Tensor, wf: RecordFormat, window_idx: torch.Tensor, page_size: int, wps: int,
                  sm_scale: float, attn_sink: torch.Tensor | None, cfg: Config, o: torch.Tensor, lse: torch.Tensor,
                  workspace: torch.Tensor | None, counters: torch.Tensor | None = None) -> None:
    """`decode` on the wgmma path (arguments already checked there; it takes no counters): the
    build the config names (MMA=wgmma: HB = 16 or 32 heads a program on the MMAs' N; wgmma_hm:
    64 heads a program on their M; wgmma_ws: 16 heads on N, warp-specialised (wgmma_wsr: with
    register-loading producers, three K buffers and two consumers, a partial each); wgmma_hmpvc:
    the QK / PV split's 64-head programs in 2-CTA clusters, from the cluster render, launched with
    num_ctas=2 after its buffers' offsets are checked once a specialisation)."""
    if q.device.type != "cuda" or interpreting():
        raise ValueError(f"MMA=wgmma runs on an sm_90 GPU only, not on {q.device}"
                         + (f" ({WGMMA_ILLEGAL['interp']})" if interpreting() else ""))
    illegal = wgmma_legality(detect().name)
    if illegal:
        raise ValueError(f"MMA=wgmma cannot run on {detect().name}: {illegal}")
    n_tok, heads = q.shape[0], q.shape[1]
    hb = wgmma_program_heads(cfg, heads, cf, wf)
    groups = triton.cdiv(heads, hb)
    topk, window = topk_idx.shape[1], window_idx.shape[1]
    parts, per = wgmma_plan(cfg, n_tok, topk, window, q.device, groups)
    # The register-producer build's programs write a partial a consumer warpgroup (program sp: 2 sp,
    # 2 sp + 1), so decode_combine always merges (it does not take MERGE: WGMMA_MERGE_MMAS).
    pp = cfg["MMA"] in WGMMA_TWO_PARTIAL_MMAS
    n_part = 2 * parts if pp else parts
    part_o, part_ml = _partials(workspace, n_tok, heads, n_part, q.device)
    sink = attn_sink if attn_sink is not None else lse  # never read without HAS_SINK
    cluster = cfg["MMA"] in WGMMA_CLUSTER_MMAS
    mod = cluster_module(cf.name, wf.name) if cluster else _wgmma_module(cf.name, wf.name)
    # The builds that run another build's kernel (shared tiles, the 2-CTA cluster's render of it).
    name = {"wgmma_hmpvs": "wgmma_hmpv", "wgmma_wss": "wgmma_ws", "wgmma_hmpvc": "wgmma_hmpv"}.get(cfg["MMA"], cfg["MMA"])
    kernel = getattr(mod, f"decode_{name}_kernel")
    # The kernels that take SHARE (and its buffers): the QK / PV split's and the warp-specialised one's
    # (by name: a trace build's wrapped kernels are not the module's objects).
    takes_share = name in ("wgmma_hmpv", "wgmma_ws")
    share = cfg["MMA"] in WGMMA_SHARE_MMAS and groups > 1
    ws, cnt, rdy = shared_tiles(n_tok * parts * per, groups, q.device) if share else (None, None, None)
    # A cluster's two CTAs take two head groups (grid axis 2 counts clusters, rank picks the group).
    grid = (n_tok, parts, groups // WGMMA_CLUSTER_CTAS if cluster else groups)
    takes_merge = name in WGMMA_MERGE_MMAS
    merge = takes_merge and cfg["COMBINE"] == "fused" and merge_fits(parts, n_tok * parts * groups, q.device)
    merge_cnt = merge_counters(n_tok * groups, q.device) if merge else topk_idx  # any int32 keeps the signature
    args = (q, comp_cache, topk_idx, win_cache, window_idx, sink, o, lse, part_o, part_ml,
            *((merge_cnt,) if takes_merge else ()),
            heads, topk, window, page_size, page_bytes(cf, page_size), wps, page_bytes(wf, wps),
            q.stride(0), q.stride(1), topk_idx.stride(0), window_idx.stride(0), per, float(sm_scale) * math.log2(math.e),
            *((ws, cnt, rdy) if takes_share else ()))
    kw: dict[str, Any] = dict(
        HB=hb, COMP_SHIFT=_pow2_shift(page_size), WIN_SHIFT=_pow2_shift(wps), SPLIT=n_part > 1,
        **({"MERGE": merge, "MERGE_S": triton.next_power_of_2(parts) if merge else 1} if takes_merge else {}),
        HAS_SINK=attn_sink is not None, num_warps=int(cfg["num_warps"]),
        **({"PREFETCH": bool(cfg["PREFETCH"])} if cfg["MMA"] in WGMMA_PREFETCH_MMAS else {}),
        **({"SHARE": share} if takes_share else {}),
        **({"num_ctas": WGMMA_CLUSTER_CTAS} if cluster else {}),
    )
    if cluster:
        check_once(kernel, grid, args, kw, mod.PEER_OFFSETS)
    kernel[grid](*args, **kw)
    if n_part > 1 and not merge:
        # The Triton module's merge (WGMMA_MERGE_BACKEND's: the family's `modules` lists it for a
        # bundle's sources), launched as a programmatic dependent: the wgmma kernel releases it
        # after its key loop (sm_90 has PDL).
        launch_combine(_module(cf.name, wf.name, WGMMA_MERGE_BACKEND), part_o, part_ml, sink, o, lse, n_part,
                       attn_sink is not None, pdl=True)


def launch_combine(mod: Any, part_o: torch.Tensor, part_ml: torch.Tensor, sink: torch.Tensor, o: torch.Tensor,
                   lse: torch.Tensor, parts: int, has_sink: bool, pdl: bool = False,
                   tile: tuple[int, int] | None = None) -> None:
    """decode_combine over `parts` partials per token of `o[T, H, 512]` (the workspace layout of
    `decode`). The block is sized to the launch's partials, not to the most any launch has:
    masked-off splits still cost the program their addresses and reductions (see combine_tile).
    `pdl`: launched as a programmatic dependent of the kernel before it (NVIDIA sm_90+ only),
    which waits for that kernel itself; the option is passed only then, so the other launches
    keep their warmup keys. `tile`: (BLOCK_D, num_warps) instead of `combine_tile`'s (a sweep's)."""
    n_tok, heads = o.shape[0], o.shape[1]
    block_s = max(2, triton.next_power_of_2(parts))
    # Heads in blocks of COMBINE_HEADS (grid axis 2): a program's rows stay BLOCK_D dims long at any
    # head count (all heads in one block took 4-dim slices at 128 heads, 16-byte reads 2 KiB apart:
    # 8.0 us to merge 10 partials of 128 heads on an H100, benchmarks/results/merge_in_kernel/).
    block_h = COMBINE_HEADS
    h_blocks = triton.cdiv(heads, block_h)
    block_d, warps = tile or combine_tile(block_s, block_h, n_tok * h_blocks, sm_count(o.device))
    extra: dict[str, Any] = {"PDL": True, "launch_pdl": True} if pdl else {}
    mod.decode_combine[(n_tok, 512 // block_d, h_blocks)](
        part_o, part_ml, sink, o, lse, heads, parts,
        BLOCK_H=block_h, BLOCK_S=block_s, BLOCK_D=block_d, HAS_SINK=has_sink, num_warps=warps, **extra,
    )
