"""The sparse MQA decode tile (FORMATS.md "decode tile"): top-k compressed keys plus a sliding
window, read straight from quantized paged caches.

A program handles one token for all of its heads (the heads of an MQA token share every gathered
row, so each record is loaded and dequantized once) over one split of its two key lists (or, with
LISTS=apart, over a chunk of one of them); with more than one program per token, partial results
are merged by their log-sum-exp (flash-decoding), so that a batch of one token still fills the GPU:
in a second kernel (COMBINE=kernel) or by the token's last program to finish (COMBINE=fused; on
the wgmma path's heads-on-N builds, by all of the token's programs after a barrier).

The family in parts that change apart: `launch` (argument checks, split plans, the launches),
`buffers` (what the wgmma builds keep per device across launches), `inputs` (inputs, run,
verification) and `xcompile` (cross-compile cases); its space,
legality and render are its catalog spec (`catalog.families.decode`). This package exports the
names callers use; a test or benchmark that replaces a launcher's helper (`sm_count`, `_module`,
`launch_combine`) patches it on `tuner.kernels.decode.launch`, where the launcher looks it up.
"""

from __future__ import annotations

from typing import Any, Sequence

from catalog.core import Bucket, Config, ProblemKey
from catalog.families.decode import (AUTO, DECODE_BUCKETS, DECODE_FORMATS, DECODE_PAGE_SIZE,  # noqa: F401
                                     ISSUE_PAIRS, MAX_HEADS, MAX_SPLITS, PDL_TARGETS, TEMPLATE, DecodeSpec, _fmt512,
                                     cfg_backends, decode_bytes, decode_key, default_config, has_e2m1,
                                     render_variant, render_wgmma, space)
from catalog.families.decode_wgmma import (WGMMA_BLOCK_N, WGMMA_FIXED, WGMMA_FORMATS, WGMMA_HEADS,  # noqa: F401
                                           WGMMA_HEADS_2WG, WGMMA_HM_HEADS, WGMMA_HM_WARPS, WGMMA_HMPV_WARPS,
                                           WGMMA_ILLEGAL, WGMMA_MERGE_BACKEND, WGMMA_WARPS, WGMMA_TEMPLATE,
                                           wgmma_config, wgmma_heads, wgmma_hm_reads, wgmma_legality, wgmma_reads)
from catalog.formats import RecordFormat, get_format, page_bytes  # noqa: F401
from tuner.kernels.base import KernelFamily, XCompileCase, sm_count  # noqa: F401
from tuner.kernels.decode import xcompile
from tuner.kernels.decode.inputs import TOL, make_decode_inputs, run_decode, verify_decode  # noqa: F401
from tuner.kernels.decode.launch import (COMBINE_ELEMS, SplitPlan, _module, _partials, _wgmma_module,  # noqa: F401
                                         combine_tile, decode, launch_combine, max_partials,
                                         resolve_splits, split_plan, wgmma_plan, workspace_numel)
from tuner.kernels.decode.xcompile import ARG_TYPES  # noqa: F401


class DecodeFamily(DecodeSpec, KernelFamily):
    page_sized = True  # the wgmma kernel's COMP_SHIFT / WIN_SHIFT

    def make_inputs(self, key: ProblemKey, bucket: Bucket, device: str, seed: int) -> dict[str, Any]:
        return make_decode_inputs(key.formats[0], key.formats[1], bucket.rep, key.heads, key.topk, key.window,
                                  device, seed)

    def probe_inputs(self, key: ProblemKey, bucket: Bucket, device: str, seed: int,
                     page_size: int | None = None) -> dict[str, Any]:
        """With `page_size`, both caches in pages of that many slots (FlashMLA's take one size)."""
        return make_decode_inputs(key.formats[0], key.formats[1], bucket.rep, key.heads, key.topk, key.window,
                                  device, seed, page_size=page_size or DECODE_PAGE_SIZE)

    def run(self, key: ProblemKey, config: Config, inputs: dict[str, Any]) -> Any:
        return run_decode(key.formats[0], key.formats[1], config, inputs)

    def verify(self, key: ProblemKey, inputs: dict[str, Any], outputs: Any) -> str | None:
        return verify_decode(key.formats[0], key.formats[1], inputs, outputs)

    def pool_args(self) -> tuple[frozenset[str], ...]:
        """Kernel pointer parameters that view a KV pool (one group per storage): they can be on
        either side of 2 GiB, which AMD's buffer ops specialise on (see tuner/warmup.py)."""
        return (frozenset({"comp_ptr"}), frozenset({"win_ptr"}))

    def probe_variants(self, inputs: dict[str, Any]) -> list[dict[str, Any]]:
        """With and without attention sinks (HAS_SINK): FlashMLA's `attn_sink` is optional."""
        return [inputs, {**inputs, "attn_sink": None}] if inputs.get("attn_sink") is not None else [inputs]

    def xcompile_cases(self) -> Sequence[XCompileCase]:
        """See `tuner.kernels.decode.xcompile.xcompile_cases`."""
        return xcompile.xcompile_cases()

    # The cases of one build (benchmarks/static_profile.py compiles configs through these).
    _main_case = staticmethod(xcompile.main_case)
    _wgmma_case = staticmethod(xcompile.wgmma_case)


FAMILY = DecodeFamily()
