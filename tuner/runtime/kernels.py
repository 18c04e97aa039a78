"""`TunedKernels`: the object an engine builds at startup and calls while it serves.

Construction is the only place anything compiles: it reads a bundle (from the server, an export
folder, or every family's defaults), checks it against this process (arch, GPU, Triton version,
the sources this kvtune generates), and warms every binary the bundle's buckets will launch
(`tuner.warmup.warm`; buckets without stored keys are enumerated here with `keys_for`). A call
then picks its bucket's config from tensor shapes on the host (a bisection; no device sync, no
allocation) and launches it. A call outside every tuned bucket runs the family's default config
and is counted; the counts go to the server from a daemon thread.
"""

from __future__ import annotations

import os
import warnings
from collections import Counter
from typing import Any, Callable, Literal, Mapping, Sequence

import torch
import triton

from catalog.core import Config, ProblemKey
from catalog.families import get_spec
from catalog.families.base import measured_hash
from tuner.kernels import get_family
from tuner.kernels.decode import decode
from tuner.kernels.logits import logits, query_dtype_name
from tuner.kernels.pack import pack as pack_launch
from tuner.kernels.pack import quant_query as quant_query_launch
from tuner.runtime import deepgemm, flash_mla
from tuner.runtime.bundle import KernelTable, Process, check, defaults_bundle, tables_from_bundle
from tuner.runtime.dispatch import MissCounter, MissReporter
from tuner.runtime.export import FormatsArg, formats_for, read_export
from tuner.runtime.views import as_pages, pages_of_2d
from tuner.targets import detect, interpreting
from tuner.warmup import WarmReport, WarmupKey, keys_for, warm

OnMismatch = Literal["warn", "error"]
TableKey = tuple[str, tuple[str, ...]]
CONFIG_FOLDER_ENV = "KVTUNE_CONFIG_FOLDER"


class BundleMismatch(ValueError):
    """A bundle measured for another device, Triton version or arch, refused (`on_mismatch="error"`)."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("kvtune bundle does not match this process: " + "; ".join(problems))
        self.problems = list(problems)


def this_process(device_index: int | None = None) -> Process:
    """This process's target, GPU name (as the bench worker records it) and Triton version."""
    target = detect()
    if target.is_gpu:
        idx = torch.cuda.current_device() if device_index is None else device_index
        name = torch.cuda.get_device_name(idx)
    else:
        name = "cpu (Triton interpreter)"
    return Process(arch=target.name, device_name=name, triton=triton.__version__)


def _local_modules(table: KernelTable, cfg: Config) -> dict[str, str]:
    """hash -> source of every module `cfg` launches, as this kvtune renders them."""
    rs = get_spec(table.name).modules(table.key, cfg)
    return {r.source_hash: r.source for r in rs} | ({measured_hash(rs): ""} if len(rs) > 1 else {})


class TunedKernels:
    """Tuned pack / decode / logits kernels behind the call conventions engines use today."""

    def __init__(self, bundle: Mapping[str, Any], sources: Mapping[str, str] | None = None, *,
                 on_mismatch: OnMismatch = "warn", warmup: bool = True, enumerate_missing: bool = True,
                 process: Process | None = None, kernels: Sequence[str] | None = None,
                 page_sizes: Sequence[int] = ()) -> None:
        """`kernels` (e.g. ["decode"]): only these families' tables are used and warmed; a call of
        another family runs its default and is counted as a miss. `page_sizes`: the page sizes of
        this engine's caches where they are not the tuner's 64 (FlashMLA's and DeepGEMM's): a
        kernel's binary depends on its caches' page size (a shift), so warmup compiles each."""
        if on_mismatch not in ("warn", "error"):
            raise ValueError(f"on_mismatch must be 'warn' or 'error', got {on_mismatch!r}")
        if any(not isinstance(p, int) or isinstance(p, bool) or p < 1 for p in page_sizes):
            raise ValueError(f"page_sizes must be positive ints, got {list(page_sizes)!r}")
        self.page_sizes = tuple(dict.fromkeys(page_sizes))
        self.bundle = bundle
        self.process = process or this_process()
        self.tables: dict[TableKey, KernelTable] = {k: t for k, t in tables_from_bundle(bundle).items()
                                                    if kernels is None or k[0] in kernels}
        self.misses = MissCounter()
        self.calls: Counter[tuple[str, str]] = Counter()  # (kernel, bucket name or "miss") -> calls
        self.reporter: MissReporter | None = None
        self._defaults: dict[tuple[str, tuple[str, ...], int], tuple[Config, ProblemKey]] = {}
        self._rows: dict[tuple[int, int, torch.device], tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}
        self._counters: dict[torch.device, torch.Tensor] = {}
        self.sources: dict[str, str] = dict(sources or {})
        self._local_hashes: set[str] = set()
        local: dict[tuple[str, tuple[str, ...], Config], tuple[str, ...]] = {}
        for (name, fm), t in self.tables.items():
            for e in t.entries:
                mods = _local_modules(t, e.config)
                local[(name, fm, e.config)] = tuple(mods)
                # The launchers render their modules here: those are the binaries worth warming.
                self.sources.update({h: s for h, s in mods.items() if s})
                self._local_hashes.update(mods)
        self.mismatches = check(self.tables, str(bundle.get("arch", self.process.arch)), self.process, local)
        self.mismatches += self._drop_illegal()
        if self.mismatches:
            if on_mismatch == "error":
                raise BundleMismatch(self.mismatches)
            warnings.warn("kvtune bundle differs from this process (its configs are used anyway, "
                          "on_mismatch='warn'): " + "; ".join(self.mismatches), stacklevel=3)
        self.warmup_keys: list[WarmupKey] = self._warmup_keys(enumerate_missing) if warmup else []
        self.warm_report: WarmReport | None = None
        if warmup and not interpreting():  # the interpreter compiles nothing: there is nothing to warm
            self.warm_report = warm(self.warmup_keys, self.sources)
            if self.warm_report.failed:
                warnings.warn(f"kvtune: {len(self.warm_report.failed)} of {len(self.warmup_keys)} warmup keys could "
                              "not be compiled (those launches compile on first use): "
                              + "; ".join(self.warm_report.failed[:5]), stacklevel=2)

    # -- constructors ----------------------------------------------------------------------------
    @classmethod
    def from_server(cls, url: str, *, arch: str | None = None, heads: int, topk: int, window: int,
                    formats: FormatsArg = None, token: str | None = None, client: Any = None,
                    report_interval_s: float = 30.0, **kw: Any) -> TunedKernels:
        """Fetch the bundle of (arch, heads, topk, window[, formats]) from a kvtune API (with this
        process's Triton version and GPU name), build, and report misses back to it."""
        from tuner.runtime.client import KvtuneClient

        proc = kw.pop("process", None) or this_process()
        cl = client or KvtuneClient(url, token=token)
        bundle = fetch_bundle(cl, arch or proc.arch, heads, topk, window, formats, proc)
        tk = cls(bundle, process=proc, **kw)
        tk.report_to(cl.report_misses, interval_s=report_interval_s)
        return tk

    @classmethod
    def from_folder(cls, path: str | os.PathLike[str] | None = None, *, arch: str | None = None, heads: int,
                    topk: int, window: int, formats: FormatsArg = None, **kw: Any) -> TunedKernels:
        """Read an export folder (`kvtune export`; default: $KVTUNE_CONFIG_FOLDER), this GPU's files."""
        folder = path or os.environ.get(CONFIG_FOLDER_ENV)
        if not folder:
            raise ValueError(f"no export folder given and ${CONFIG_FOLDER_ENV} is not set")
        proc = kw.pop("process", None) or this_process()
        bundle, sources = read_export(folder, arch=arch or proc.arch, heads=heads, topk=topk, window=window,
                                      formats=formats, device_name=proc.device_name)
        return cls(bundle, sources, process=proc, **kw)

    @classmethod
    def defaults(cls, arch: str | None, heads: int, topk: int, window: int, formats: FormatsArg = None,
                 kernels: Sequence[str] | None = None, **kw: Any) -> TunedKernels:
        """Every family's (or only `kernels`') default config on its default buckets: no server
        (first runs, tests, fallback). Fewer kernels, less to warm at construction."""
        proc = kw.pop("process", None) or this_process()
        return cls(defaults_bundle(arch or proc.arch, heads, topk, window, formats, kernels), process=proc,
                   kernels=kernels, **kw)

    def report_to(self, send: Callable[[dict[str, Any]], Any], interval_s: float = 30.0,
                  batch: int = 1024) -> MissReporter:
        """Send miss counts through `send(payload)` from a daemon thread (see dispatch.MissReporter)."""
        if self.reporter is not None:
            self.reporter.close()
        self.reporter = MissReporter(self.misses, send, device=self.process.device_name, triton=self.process.triton,
                                     interval_s=interval_s, batch=batch)
        return self.reporter

    def close(self) -> None:
        """Flush pending miss counts (once) and stop the reporter."""
        if self.reporter is not None:
            self.reporter.flush()
            self.reporter.close()
            self.reporter = None

    # -- construction helpers --------------------------------------------------------------------
    def _drop_illegal(self) -> list[str]:
        """Configs this target cannot run (a bundle for another arch): their family's default instead."""
        out = []
        for (name, fm), t in self.tables.items():
            spec = get_spec(name)
            fixed = []
            for e in t.entries:
                why = spec.config_legality(e.config, self.process.arch)
                if why:
                    out.append(f"{name} {'+'.join(fm)} {e.bucket.name()}: config cannot run on {self.process.arch} "
                               f"({why}): the default runs")
                    e = type(e)(bucket=e.bucket, config=t.default_config, source_hash=e.source_hash, default=True)
                fixed.append(e)
            self.tables[(name, fm)] = KernelTable(name=name, key=t.key, entries=tuple(fixed),
                                                  default_config=t.default_config, tuned=t.tuned)
        return out

    def _warmup_keys(self, enumerate_missing: bool) -> list[WarmupKey]:
        """Every binary the tables' buckets launch: stored keys where they were made for this
        Triton, this target and sources this kvtune generates; else (with `enumerate_missing`)
        enumerated here on this device. Under the interpreter there is nothing to enumerate."""
        seen: dict[str, WarmupKey] = {}
        device = "cuda" if self.process.arch != "interp" and torch.cuda.is_available() else "cpu"
        for (name, _), t in sorted(self.tables.items()):
            for e in t.entries:
                stored = e.warmup or {}
                keys = [WarmupKey.from_json(k) for k in stored.get("keys", ())]
                usable = (keys and stored.get("target") == self.process.arch
                          and stored.get("triton_version") == self.process.triton
                          and all(k.source_hash in self._local_hashes for k in keys))
                if not usable:
                    if not enumerate_missing or interpreting():
                        continue
                    keys = keys_for(name, t.key, e.config, e.bucket, self.process.arch, device=device)
                if get_family(name).page_sized and not interpreting():  # the engine's other page sizes
                    keys = keys + [k for p in self.page_sizes
                                   for k in keys_for(name, t.key, e.config, e.bucket, self.process.arch, device=device,
                                                     page_size=p)]
                for k in keys:
                    seen.setdefault(repr((k.fn, k.source_hash, k.args, k.options)), k)
        return list(seen.values())

    # -- dispatch --------------------------------------------------------------------------------
    def _default(self, kernel: str, formats: tuple[str, ...], heads: int, topk: int, window: int) -> tuple[Config, ProblemKey]:
        got = self._defaults.get((kernel, formats, heads))
        if got is None:
            arch = self.process.arch
            key = ProblemKey(kernel, arch, heads, topk, window, formats) if kernel == "decode" else None
            if kernel == "logits":
                key = ProblemKey("logits", arch, heads=heads, topk=0, window=0, formats=formats, head_dim=128)
            if kernel == "pack":
                from catalog.families.pack import pack_key

                key = pack_key(formats[0], arch, formats[1] if len(formats) == 2 else None)
            assert key is not None
            got = (get_spec(kernel).default_config(key), key)
            self._defaults[(kernel, formats, heads)] = got
        return got

    def config_for(self, kernel: str, formats: tuple[str, ...], dim: str, n: int, *, heads: int = 0, topk: int = 0,
                   window: int = 0, ctx: int = 0) -> Config:
        """The config a call of size n launches: its bucket's, else (counted as a miss) the default."""
        t = self.tables.get((kernel, formats))
        if t is not None and (kernel == "pack" or (kernel == "logits" and t.key.heads == heads)
                              or t.shape_matches(heads, topk, window)):
            e = t.lookup(dim, n, ctx)
            if e is not None:
                self.calls[(kernel, e.bucket.name())] += 1
                return e.config
            self.misses.count(t.key, dim, n)
            self.calls[(kernel, "miss")] += 1
            return t.default_config
        cfg, key = self._default(kernel, formats, heads, topk, window)
        self.misses.count(key, dim, n)
        self.calls[(kernel, "miss")] += 1
        return cfg

    def _row_constants(self, b: int, next_n: int, device: torch.device) -> tuple[torch.Tensor, ...]:
        k = (b, next_n, device)
        got = self._rows.get(k)
        if got is None:
            got = self._rows[k] = deepgemm.row_constants(b, next_n, device)
        return got

    def _counters_for(self, n_tok: int, device: torch.device) -> torch.Tensor:
        # The fused merge's arrival counters: zeroed once, left zero by every completed launch.
        got = self._counters.get(device)
        if got is None or got.numel() < n_tok:
            got = self._counters[device] = torch.zeros(max(64, n_tok), dtype=torch.int32, device=device)
        return got

    # -- entry points ----------------------------------------------------------------------------
    def flash_mla_with_kvcache(
        self, q: torch.Tensor, k_cache: torch.Tensor, block_table: torch.Tensor | None,
        cache_seqlens: torch.Tensor | None, head_dim_v: int, tile_scheduler_metadata: Any, num_splits: Any = None,
        softmax_scale: float | None = None, causal: bool = False, is_fp8_kvcache: bool = True,
        indices: torch.Tensor | None = None, attn_sink: torch.Tensor | None = None,
        extra_k_cache: torch.Tensor | None = None, extra_indices_in_kvcache: torch.Tensor | None = None,
        topk_length: torch.Tensor | None = None, extra_topk_length: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """FlashMLA's sparse decode (see tuner/runtime/flash_mla.py): returns (out (B, s_q, H, 512)
        bf16, softmax_lse (B, H, s_q) fp32). block_table, cache_seqlens, tile_scheduler_metadata and
        num_splits are accepted and unused, as FlashMLA's sparse mode does not use them either."""
        call = flash_mla.adapt(q, k_cache, head_dim_v, softmax_scale, causal, is_fp8_kvcache, indices, attn_sink,
                               extra_k_cache, extra_indices_in_kvcache, topk_length, extra_topk_length)
        cfg = self.config_for("decode", call.formats, "T", call.tokens, heads=call.heads,
                              topk=int(call.comp_idx.shape[1]), window=int(call.win_idx.shape[1]))
        o, lse = decode(call.q, call.comp_cache, call.comp_fmt, call.comp_idx, call.win_cache, call.win_fmt,
                        call.win_idx, call.comp_page, call.sm_scale, call.sink, cfg, win_page_size=call.win_page,
                        counters=self._counters_for(call.tokens, q.device), topk_lens=call.comp_lens,
                        window_lens=call.win_lens, seq_tokens=call.s_q)
        return flash_mla.outputs(o, lse, call)

    def fp8_paged_mqa_logits(self, q: torch.Tensor | tuple[torch.Tensor, torch.Tensor], kv_cache: torch.Tensor,
                             weights: torch.Tensor, context_lens: torch.Tensor, block_table: torch.Tensor,
                             schedule_metadata: Any, max_model_len: int, clean_logits: bool = True) -> torch.Tensor:
        """DeepGEMM's paged MQA logits (see tuner/runtime/deepgemm.py): fp32[B * next_n,
        max_model_len], -inf outside each row's range (with or without clean_logits). `q` is fp8
        or bf16 (B, next_n, Hi, 128), or an MXFP4 query `(values, scales)` as DeepGEMM's FP4 path
        takes it (the logits key's query dtype "mxfp4"). schedule_metadata is accepted and unused."""
        call = deepgemm.adapt(q, kv_cache, weights, context_lens, block_table, max_model_len, self._row_constants)
        fm = (call.fmt.name, query_dtype_name(call.q))
        cfg = self.config_for("logits", fm, "B", call.rows, heads=call.heads, ctx=call.max_len)
        return logits(call.q, call.w, call.cache, call.fmt, call.page_size, call.block_table, call.seq_of,
                      call.k_start, call.k_end, call.max_len, cfg)

    def pack(self, x: torch.Tensor, slot_mapping: torch.Tensor, cache: torch.Tensor, fmt: str,
             page_size: int | None = None) -> torch.Tensor:
        """Write x's records into their slots of `cache`, given as (blocks, P, 1, bytes) or
        (blocks, page_bytes) (`page_size` where the row size leaves P ambiguous). Returns `cache`."""
        if cache.dim() == 4:
            flat, p = as_pages(cache, fmt)
        else:
            flat, p = cache, pages_of_2d(cache, fmt, page_size)
        slots = slot_mapping if slot_mapping.dtype == torch.int64 else slot_mapping.long()
        cfg = self.config_for("pack", (fmt,), "N", int(x.shape[0]))
        pack_launch(x, slots, flat, fmt, p, cfg)
        return cache

    def quant_query(self, x: torch.Tensor, values: torch.Tensor | None = None,
                    scales: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The indexer's MXFP4 query: x[..., 128] (e.g. (B * next_n, Hi, 128) bf16) as
        (values uint8[..., 64], scales uint8[..., 4]), what `fp8_paged_mqa_logits` takes as `q`; the
        config of the call's bucket (N = rows of 128 dims) from the bundle's ("mxfp4_68", "query") key."""
        rows = x.numel() // x.shape[-1] if x.dim() else 0
        cfg = self.config_for("pack", ("mxfp4_68", "query"), "N", rows)
        return quant_query_launch(x, cfg, values, scales)


def fetch_bundle(client: Any, arch: str, heads: int, topk: int, window: int, formats: FormatsArg,
                 proc: Process) -> dict[str, Any]:
    """The server's bundle; with per-kernel formats, one request per distinct format list, merged."""
    kw = {"triton": proc.triton, "device": proc.device_name}
    if not isinstance(formats, Mapping):
        return client.fetch_bundle(arch, heads, topk, window, list(formats) if formats else None, **kw)
    from catalog.families import family_names

    merged: dict[str, Any] | None = None
    groups: dict[tuple[str, ...] | None, list[str]] = {}
    for name in family_names():
        fm = formats_for(name, formats)
        groups.setdefault(tuple(fm) if fm else None, []).append(name)
    for fm, names in groups.items():
        b = client.fetch_bundle(arch, heads, topk, window, list(fm) if fm else None, **kw)
        if merged is None:
            merged = {**b, "kernels": {}, "unavailable": {}, "formats": None}
        merged["kernels"].update({n: k for n, k in b["kernels"].items() if n in names})
        merged["unavailable"].update({n: r for n, r in b.get("unavailable", {}).items() if n in names})
    assert merged is not None
    return merged
