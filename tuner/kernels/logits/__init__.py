"""The MQA indexer logits family: `sum_h w[t,h] * relu(q[t,h] . K_j)` over a paged mxfp4_68 or
fp8_132 K cache (FORMATS.md "logits").

A program takes QT query tokens (of one sequence) against TILES tiles of BLOCK_N consecutive keys:
it loads the query once, reads each tile's records through the block table (gathered row by row,
or with LOADS=descriptor as tensor-descriptor loads: TMA copies on NVIDIA, which Triton pipelines
through shared memory), turns them into dot
operands (the `dot` variant axis: e4m3 codes for an fp8 tensor-core dot with per-32-dim scales
applied to the partial products, built with integer ops (fp8) or byte-permute table lookups
(fp8lut, NVIDIA); e4m3 codes with each chunk's scale relative to its key's largest folded into
their exponents, for one dot and one scale per key (fp8key, fp8keylut); bf16 values for a bf16
dot, or the raw nibbles and scales for `tl.dot_scaled`),
applies relu, weights by w and reduces over heads. Every output element is written.
An MXFP4 query (q_dtype "mxfp4": a pair of values and ue8m0 scales, one mxfp4_68 record per row)
goes to tl.dot_scaled as it is (`mxfp4q.scaled`), or is decoded once per program to e4m3 codes for
the other dot paths (`mxfp4q.fp8`, ...), whose key path is unchanged.

The family in three parts that change apart: `launch` (argument checks, the config a launch
runs, the launches), `inputs` (inputs, warmup probes, run, verification) and `xcompile`
(cross-compile cases); its space, legality and render are its catalog spec
(`catalog.families.logits`). This package exports the names callers use; a test or benchmark that
replaces a launcher's helper (`render_variant`) patches it on `tuner.kernels.logits.launch`.
"""

from __future__ import annotations

from typing import Any, Sequence

from catalog.core import Bucket, Config, ProblemKey
from catalog.families.logits import (DECODE_CTX, DECODING_DOTS, E2M1_ONLY_DOTS, HEAD_DIM,  # noqa: F401
                                     KEY_SCALED_DOTS, LOGITS_FORMATS, SEED_HEADS, SEED_PAGE, TEMPLATE, VARIANTS,
                                     WGMMA_BLOCK_N, WGMMA_DESC_TYPE, WGMMA_SWIZZLE, WGMMA_TEMPLATE, LogitsSpec,
                                     _check_fmt, _check_heads, _key_parts, config_legality, default_config,
                                     desc_box, dot_config, logits_bytes, logits_key, parse_variant, render_variant,
                                     scale_desc, space, variant_name)
from tuner.kernels.base import KernelFamily, XCompileCase
from tuner.kernels.logits import xcompile
from tuner.kernels.logits.inputs import (TOL, _int_class, make_inputs, make_query, paged_sequences,  # noqa: F401
                                         probe_contexts, query_rows, random_cache, run_inputs, to_device,
                                         verify_inputs)
from tuner.kernels.logits.launch import (Q_DTYPES, Query, logits, q_dtype_name, query_dtype_name,  # noqa: F401
                                         query_tensors, wgmma_descriptor)
from tuner.kernels.logits.xcompile import _wgmma_xcompile_case, _xcompile_case, arg_types  # noqa: F401


class LogitsFamily(LogitsSpec, KernelFamily):
    page_sized = True  # the kernels' PAGE

    def pool_args(self) -> tuple[frozenset[str], ...]:
        """Kernel pointer parameters that view a KV pool (one group per storage): they can be on
        either side of 2 GiB, which AMD's buffer ops specialise on (see tuner/warmup.py)."""
        return (frozenset({"cache_ptr", "k_desc", "s_desc"}),)  # the descriptors: the cache again, unless DESC

    def xcompile_cases(self) -> Sequence[XCompileCase]:
        """See `tuner.kernels.logits.xcompile.xcompile_cases`."""
        return xcompile.xcompile_cases()

    def make_inputs(self, key: ProblemKey, bucket: Bucket, device: str, seed: int) -> dict[str, Any]:
        return make_inputs(key, bucket, device, seed)

    def probe_inputs(self, key: ProblemKey, bucket: Bucket, device: str, seed: int,
                     page_size: int | None = None) -> dict[str, Any]:
        """`make_inputs` for warmup-key enumeration (tuner.warmup.keys_for): launch-identical, cheap."""
        return make_inputs(key, bucket, device, seed, page_size or SEED_PAGE, probe=True)

    def probe_contexts(self, bucket: Bucket, page_size: int | None = None) -> list[int]:
        """Contexts whose launches reach every specialisation class of the integers that follow the
        context: max_len and max_pages (its page count), since an engine's batch can have any
        longest context up to the bucket's (see `probe_contexts`)."""
        return probe_contexts(bucket.ctx or DECODE_CTX, page_size or SEED_PAGE)

    def run(self, key: ProblemKey, config: Config, inputs: dict[str, Any]) -> Any:
        return run_inputs(key, config, inputs)

    def verify(self, key: ProblemKey, inputs: dict[str, Any], outputs: Any) -> str | None:
        return verify_inputs(key, inputs, outputs)


FAMILY = LogitsFamily()
