"""Where the logits kernel's time goes: leave-one-stage-out variants of the generated module, timed
like the benchmark (CUDA graph replay, median) at the issue's decode shape, B = 64 x 64K, page 64.

  full        the config as it ships
  no_decode   (the key-scaled mxfp4_68 paths) the e2m1 -> e4m3 conversion left out: the packed bytes,
              each twice, bitcast to the dot's fp8 operand, the scale word to the key's scale; loads,
              dot, relu and head sum as shipped: what the kernel would take with a free conversion
  no_dot      records loaded and decoded to the dot's operands, the dot, relu and head sum replaced by
              a sum over each key's operands: the cost of the reads and the decode
  loads_only  records loaded, nothing decoded: their raw bytes summed per key (what the memory
              system and the address chain alone cost)

The output of the variants is garbage by construction; only their time means something.

    python benchmarks/logits_breakdown.py --out benchmarks/results
    python benchmarks/logits_breakdown.py --fmt fp8_132 --cfg "" --cfg "TILES=16"
    TRITON_INTERPRET=1 python benchmarks/logits_breakdown.py --smoke   # plumbing check on a CPU
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import tuner.kernels.logits as L  # noqa: E402
from templates import render as R  # noqa: E402
from catalog.core import Bucket  # noqa: E402

VARIANTS = ("full", "no_decode", "no_dot", "loads_only")
HEADS_CALL = re.compile(r"^(\s*)acc = _heads\(.*\)$", re.M)
DECODE_CALL = re.compile(r"^(\s*)(\S.*?) = _decode_k\((.+?), BLOCK_N\)$", re.M)


def _per_key_sum(names: list[str], is_2d) -> str:  # noqa: ANN001
    """An fp32 [BLOCK_N] expression that uses every named tensor (so none of their loads is dropped)."""
    return " + ".join(f"tl.sum({n}.to(tl.float32), axis=1)" if is_2d(n) else f"{n}.to(tl.float32)" for n in names)


def breakdown_source(fmt: str, cfg, name: str, render=L.render_variant) -> str | None:  # noqa: ANN001
    """The module of `cfg` (rendered by `render`) with stage `name` left out (see `variant`). The
    breakdown edits the Triton template's module; the wgmma path is a Gluon kernel of its own."""
    rendered = render(fmt, cfg["dot"], cfg["backend"])
    if rendered.template != L.TEMPLATE:
        raise ValueError(f"the breakdown edits the Triton template's module (templates/{L.TEMPLATE}); "
                         f"dot={cfg['dot']} renders {rendered.template}")
    return variant(rendered.source, name)


def variant(src: str, name: str) -> str | None:
    """The generated module with one stage left out (see the module docstring); None where the
    variant does not apply to the module's dot path."""
    if name == "full":
        return src
    decodes = DECODE_CALL.findall(src)
    heads = HEADS_CALL.findall(src)
    assert decodes and len(heads) == 1, "the template's tile loop changed: update logits_breakdown.py"
    kv = [n.strip() for n in decodes[0][1].split(",")]
    raw = [n.strip() for n in decodes[0][2].split(",")]
    if name == "no_decode":
        if (kv, raw) != (["k0", "s0"], ["kb", "sw"]):
            return None
        return DECODE_CALL.sub(lambda m: (f"{m.group(1)}k0 = tl.reshape(tl.join(kb, kb), [BLOCK_N, DIMS]).to(tl.float8e4nv, "
                                          f"bitcast=True)\n{m.group(1)}s0 = sw.to(tl.float32, bitcast=True)"), src)
    zeros = "tl.zeros([R, BLOCK_N], dtype=tl.float32)"
    if name == "no_dot":
        # Operands: k* are [BLOCK_N, dims] tiles (ksc [BLOCK_N, 4] scales), s* per-key scales.
        body = _per_key_sum(kv, lambda n: n.startswith("k"))
        return HEADS_CALL.sub(lambda m: f"{m.group(1)}acc = {zeros} + ({body})[None, :]", src)
    # loads_only: raw tiles are b*, kb, kr; sw and s32 are per-key scale words.
    body = _per_key_sum(raw, lambda n: n.startswith("b") or n in ("kb", "kr"))
    src = DECODE_CALL.sub(lambda m: f"{m.group(1)}pass", src)
    return HEADS_CALL.sub(lambda m: f"{m.group(1)}acc = {zeros} + ({body})[None, :]", src)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "results"))
    ap.add_argument("--fmt", action="append", default=None, help="mxfp4_68 and/or fp8_132 (default: both)")
    ap.add_argument("--cfg", action="append", default=None, help="NAME=v,... over the default (repeatable)")
    ap.add_argument("--smoke", action="store_true", help="tiny shape, no timing: checks the variants build and run")
    args = ap.parse_args()
    import triton

    from benchmarks.common import parse_cfg, provenance

    dev = "cpu" if args.smoke else "cuda"
    bucket = Bucket("B", 1, 2, 256) if args.smoke else Bucket("B", 1, 64, 65536)
    rows = []
    real_render = L.render_variant
    for fmt in args.fmt or list(L.LOGITS_FORMATS):
        key = L.logits_key(fmt, "fp8")
        inp = L.make_inputs(key, bucket, dev, seed=1)
        for text in args.cfg or [""]:
            cfg = parse_cfg(text, L.default_config(fmt, "fp8"))
            for name in VARIANTS:
                src = breakdown_source(fmt, cfg, name, real_render)
                if src is None:
                    continue
                L.launch.render_variant = lambda *a, _s=src: R.Rendered("logits.py.j2", _s)  # the launcher's module
                try:
                    if args.smoke:
                        L.run_inputs(key, cfg, inp)
                        us = float("nan")
                    else:
                        us = triton.testing.do_bench_cudagraph(lambda: L.run_inputs(key, cfg, inp), rep=100,
                                                               return_mode="median") * 1e3
                finally:
                    L.launch.render_variant = real_render
                moved = L.logits_bytes(key, bucket)
                rows.append({"fmt": fmt, "config": text or "default", "variant": name, "us": us,
                             "TBps": moved / (us * 1e-6) / 1e12 if us == us else None})
                print(f"{fmt:9s} {text or 'default':18s} {name:10s} {us:8.1f} us", flush=True)
        del inp
    if args.smoke:
        return 0
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    prov = provenance()
    (out / "logits_breakdown.json").write_text(json.dumps({"provenance": prov, "shape": bucket.to_json(), "rows": rows},
                                                          indent=1))
    md = [f"# logits kernel: leave-one-stage-out\n\n{prov['gpu']}, torch {prov['torch']}, triton {prov['triton']}, "
          f"{prov['date']}. B=64 x 64K context, 64 heads x 128, page 64, fp8 query; CUDA graph median; TB/s = "
          "the bytes the full kernel must move over the variant's time.\n",
          "| format | config | variant | us | TB/s |", "|---|---|---|---|---|"]
    md += [f"| {r['fmt']} | {r['config']} | {r['variant']} | {r['us']:.1f} | {r['TBps']:.2f} |" for r in rows]
    (out / "logits_breakdown.md").write_text("\n".join(md) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
