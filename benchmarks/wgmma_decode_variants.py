"""Side-by-side timings of throwaway variants of the decode tile's wgmma kernel (H200): each
variant is the rendered template with one source edit, checked against the reference, then timed
(CUDA graph median, one input set) at a few (T, NUM_SPLITS). Nothing here is kept in the template
unless it wins; the table goes to benchmarks/results/decode_wgmma_variants.md by hand. (The
records a tile early into registers, timed here once, spilled; they now travel by cp.async into
shared stage buffers: results/decode_cp_async.md.)"""
from __future__ import annotations

import re
import sys

import torch

from benchmarks.common import provenance, time_us
from templates import render as R
from tuner.kernels import decode as dec

PAIR = ("nvfp4_288", "fp8_528")
MMA1 = """    s = warpgroup_mma(kv_smem.index(z), q_smem.index(z).permute((1, 0)),
                      gl.zeros([BLOCK_N, m_i.shape[0]], gl.float32, s_l), use_acc=False, is_async=True)
    for c in gl.static_range(1, 4):
        s = warpgroup_mma(kv_smem.index(z + c), q_smem.index(z + c).permute((1, 0)), s, is_async=True)
    s = warpgroup_mma_wait(0, deps=(s,))
"""
SPLIT_ACC = """    zs = gl.zeros([BLOCK_N, m_i.shape[0]], gl.float32, s_l)
    a0 = warpgroup_mma(kv_smem.index(z), q_smem.index(z).permute((1, 0)), zs, use_acc=False, is_async=True)
    a1 = warpgroup_mma(kv_smem.index(z + 1), q_smem.index(z + 1).permute((1, 0)), zs, use_acc=False, is_async=True)
    a2 = warpgroup_mma(kv_smem.index(z + 2), q_smem.index(z + 2).permute((1, 0)), zs, use_acc=False, is_async=True)
    a3 = warpgroup_mma(kv_smem.index(z + 3), q_smem.index(z + 3).permute((1, 0)), zs, use_acc=False, is_async=True)
    a0, a1, a2, a3 = warpgroup_mma_wait(0, deps=(a0, a1, a2, a3))
    s = (a0 + a1) + (a2 + a3)
"""


def variants(src: str) -> dict[str, str]:
    out = {"base": src}
    assert MMA1 in src
    out["mma1_4acc"] = src.replace(MMA1, SPLIT_ACC)
    # MMA 1 of chunk c issued as soon as chunk c is in shared memory (four barriers a tile), its
    # accumulators waited for in _attend.
    v = src.replace(MMA1, "    a0, a1, a2, a3 = warpgroup_mma_wait(0, deps=(a0, a1, a2, a3))\n    s = (a0 + a1) + (a2 + a3)\n")
    v = v.replace("def _attend(kv_smem, q_smem, p_smem, z, valid,", "def _attend(kv_smem, q_smem, p_smem, z, a0, a1, a2, a3, valid,")
    v = v.replace("    fence_async_shared()\n    gl.thread_barrier()\n    a0, a1", "    a0, a1", 1)
    for name in ("_comp", "_win"):
        for c in range(4):
            old = f"        kv_smem.index(z + {c}).store({name}_chunk(b, sb, L3))\n"
            new = old + (f"        fence_async_shared()\n        gl.thread_barrier()\n"
                         f"        a{c} = warpgroup_mma(kv_smem.index(z + {c}), q_smem.index(z + {c}).permute((1, 0)), "
                         f"gl.zeros([BLOCK_N, m_i.shape[0]], gl.float32, s_l), use_acc=False, is_async=True)\n")
            v = v.replace(old, new)
    v = v.replace("_attend(kv_smem, q_smem, p_smem, z, slot >= 0,", "_attend(kv_smem, q_smem, p_smem, z, a0, a1, a2, a3, slot >= 0,")
    out["mma1_per_chunk"] = v
    # Leave-one-stage-out (wrong results, timing only):
    # no_loads: every record copy predicated off at run time (issued, moves no bytes).
    assert "mask=valid[:, None])" in src and "mask=svalid[:, None])" in src
    out["no_loads"] = src.replace("mask=valid[:, None])", "mask=valid[:, None] & (page_size < 0))").replace(
        "mask=svalid[:, None])", "mask=svalid[:, None] & (page_size < 0))")
    # no_dequant: the raw bytes widened to bf16 in place of the lookups and scaling.
    nd = re.sub(r"(def _comp_chunk\(b, sb, L3: gl.constexpr\):\n)", r"\1    v = b.to(gl.bfloat16)\n    return gl.reshape(gl.join(v, v), [BLOCK_N, CHUNK])\n", src)
    out["no_dequant"] = re.sub(r"(def _win_chunk\(b, sb, L3: gl.constexpr\):\n)", r"\1    return gl.reshape(b.to(gl.bfloat16), [BLOCK_N, CHUNK])\n", nd)
    # no_mma2: MMA 2 left out (o only rescaled).
    i = src.index("    o0 = warpgroup_mma(kv_smem.index(z).permute")
    j = src.index("    o0, o1, o2, o3 = warpgroup_mma_wait(0, deps=(o0, o1, o2, o3))\n")
    j += len("    o0, o1, o2, o3 = warpgroup_mma_wait(0, deps=(o0, o1, o2, o3))\n")
    out["no_mma2"] = src[:i] + "    o0 = o0 * a_o\n    o1 = o1 * a_o\n    o2 = o2 * a_o\n    o3 = o3 * a_o\n" + src[j:]
    # divide: page and offset by integer division even for a power-of-two page size.
    assert "    if SHIFT >= 0:\n" in src
    out["divide"] = src.replace("    if SHIFT >= 0:\n", "    if SHIFT >= 99:\n")
    # no_reduce: the running max without its cross-warp reduction (the sums are per row already).
    out["no_reduce"] = src.replace("m_new = gl.maximum(m_i, gl.max(s, axis=0))", "m_new = m_i + 0.0")
    # separate_stage_allocs: each chunk's stage rows an allocation of its own ([2, keys, bytes]
    # instead of one [8, ...] indexed 4u + c), so the membar pass sees no write-after-write
    # between a tile's four chunk copies (static sm_90: 10 CTA barriers fewer, 3 a tile issue).
    out["separate_stage_allocs"] = _separate_stage_allocs(src)
    return out


def _separate_stage_allocs(src: str) -> str:
    v = src
    for name, pre in (("_comp", "c"), ("_win", "w")):
        if f"def {name}_issue(" not in v:
            continue
        v = v.replace(f"def {name}_issue(cache_ptr, slot, page_size, page_bytes, rows, srows, u, SHIFT: gl.constexpr):",
                      f"def {name}_issue(cache_ptr, slot, page_size, page_bytes, r0, r1, r2, r3, srows, u, SHIFT: gl.constexpr):")
        v = v.replace(f"def {name}_pass(cache_ptr, idx_row, n_keys, t0, t1, slot, slot_n, page_size, page_bytes, kv_smem, q_smem,\n"
                      "        p_smem, rows, srows,",
                      f"def {name}_pass(cache_ptr, idx_row, n_keys, t0, t1, slot, slot_n, page_size, page_bytes, kv_smem, q_smem,\n"
                      "        p_smem, r0, r1, r2, r3, srows,")
        v = v.replace(f"{name}_issue(cache_ptr, slot_n, page_size, page_bytes, rows, srows, u ^ 1, SHIFT)",
                      f"{name}_issue(cache_ptr, slot_n, page_size, page_bytes, r0, r1, r2, r3, srows, u ^ 1, SHIFT)")
        for c in range(4):
            v = v.replace(f"        b, sb = {name}_take(rows, srows, u, {c}, L3)", f"        b, sb = {name}_take(r{c}, srows, u, {c}, L3)")
        rows = f"{pre}_rows"
        v = v.replace(f", {rows}, {pre}_srows,", f", {pre}_r0, {pre}_r1, {pre}_r2, {pre}_r3, {pre}_srows,")
        v = v.replace(f"    {rows} = gl.allocate_shared_memory(gl.uint8, {name.upper()}_ROWS, st_l)\n",
                      "".join(f"    {pre}_r{c} = gl.allocate_shared_memory(gl.uint8, {name.upper()}_ROWS, st_l)\n" for c in range(4)))
        v = v.replace(f"{name.upper()}_ROWS = gl.constexpr([8, BLOCK_N,", f"{name.upper()}_ROWS = gl.constexpr([2, BLOCK_N,")
    v = v.replace("    async_copy.async_copy_global_to_shared(rows.index(4 * u + 0),", "    async_copy.async_copy_global_to_shared(r0.index(u),")
    for c in range(1, 4):
        v = v.replace(f"    async_copy.async_copy_global_to_shared(rows.index(4 * u + {c}),", f"    async_copy.async_copy_global_to_shared(r{c}.index(u),")
    v = v.replace("    row = rows.index(4 * u + c)._reinterpret(", "    row = rows.index(u)._reinterpret(")
    assert "rows.index(4 * u" not in v and "c_rows" not in v and "w_rows" not in v
    return v


def main() -> None:
    print(provenance())
    src = dec.render_wgmma(*PAIR).source
    cases = [(1, 1), (1, 0), (8, 0), (64, 2), (64, 4)]
    only = set(sys.argv[1].split(",")) if len(sys.argv) > 1 else None
    # T=64: eight input sets (110 MB of records, over twice the L2) cycled in one timed call, so
    # that the records come from DRAM as in serving; T <= 8: one set.
    inputs = {t: [dec.make_decode_inputs(*PAIR, t, 16, 512, 128, "cuda", seed=t * 100 + k) for k in range(8 if t == 64 else 1)]
              for t in {t for t, _ in cases}}
    rows = {}
    for name, v in variants(src).items():
        if only and name not in only:
            continue
        mod = R.load(R.Rendered(dec.WGMMA_TEMPLATE, v))
        dec.launch._wgmma_module = lambda c, w, mod=mod: mod  # type: ignore[assignment]  (the launcher's)
        res = []
        for t, s in cases:
            cfg = dec.wgmma_config(dec.default_config(*PAIR)).replace(NUM_SPLITS=s)
            sets = inputs[t]
            i = sets[0]
            i["out"][0].fill_(float("nan"))
            bad = dec.verify_decode(*PAIR, i, dec.run_decode(*PAIR, cfg, i))
            us = time_us(lambda: [dec.run_decode(*PAIR, cfg, x) for x in sets]) / len(sets)
            res.append(f"{us:.2f}" + ("" if bad is None else f" FAIL {bad}"))
        rows[name] = res
        print(name, res, flush=True)
    print("| variant | " + " | ".join(f"T={t} S={s or 'auto'}" for t, s in cases) + " |")
    for name, res in rows.items():
        print(f"| {name} | " + " | ".join(res) + " |")


if __name__ == "__main__":
    main()
