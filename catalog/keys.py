"""The ProblemKey of each kernel for a model shape: one mapping, shared by the CLI, the API and the
benchmarks, so `kvtune tune` and `POST /v1/tune` can never key the same work differently."""

from __future__ import annotations

from typing import Sequence

from catalog.core import Bucket, ProblemKey

DECODE_FORMATS = ("nvfp4_288", "fp8_528")  # (compressed cache, sliding-window cache): V4.1
LOGITS_FORMATS = ("mxfp4_68", "fp8")  # (indexer K cache, query dtype)
PACK_FORMAT = "nvfp4_288"
LOGITS_HEADS = 64  # index heads of the indexer, whatever the attention's local heads
LOGITS_HEAD_DIM = 128
DECODE_HEAD_DIM = 512


def make_key(kernel: str, arch: str, heads: int = 16, topk: int = 512, window: int = 128,
             formats: Sequence[str] | None = None) -> ProblemKey:
    """pack: the record format on an arch (heads/topk/window do not apply);
    decode: (comp_fmt, win_fmt), head_dim 512; logits: (cache_fmt, q_dtype), 64 index heads x 128,
    no window."""
    fm = tuple(formats) if formats else ()
    if kernel == "pack":
        from catalog.families.pack import QUERY_DEST, pack_key

        # (record format,) writes a paged cache; (record format, "query") the dense query records of
        # the MXFP4 indexer query (the quantiser's own key: it never shares configs with the cache's).
        if len(fm) > 2 or (len(fm) == 2 and fm[1] != QUERY_DEST):
            raise ValueError(f"pack takes one record format, or a format and {QUERY_DEST!r}, got {list(fm)}")
        return pack_key(fm[0] if fm else PACK_FORMAT, arch, fm[1] if len(fm) == 2 else None)
    # Each family's format check runs here, so a key that exists can always be defaulted and rendered
    # (a bundle skips a family whose key raises ValueError; a later failure would be a 500).
    if kernel == "decode":
        from catalog.families.decode import check_formats as check_decode
        from catalog.families.decode import check_heads

        fm = fm or DECODE_FORMATS
        if len(fm) != 2:
            raise ValueError(f"decode takes two formats (compressed, window), got {list(fm)}")
        check_decode(*fm)
        check_heads(heads, arch, fm)
        return ProblemKey("decode", arch, heads=heads, topk=topk, window=window, formats=fm, head_dim=DECODE_HEAD_DIM)
    if kernel == "logits":
        fm = fm or LOGITS_FORMATS
        if len(fm) != 2:
            raise ValueError(f"logits takes (cache format, query dtype), got {list(fm)}")
        from catalog.families.logits import check_formats as check_logits

        check_logits(*fm)
        return ProblemKey("logits", arch, heads=LOGITS_HEADS, topk=topk, window=0, formats=fm, head_dim=LOGITS_HEAD_DIM)
    raise ValueError(f"unknown kernel {kernel!r}; known: pack, decode, logits")


def parse_buckets(spec: str, defaults: Sequence[Bucket]) -> list[Bucket]:
    """`"1-1,2-4,5-8"` (or `"16"`, or `"1-64@4096"` for a context length) -> buckets of the
    family's batch dimension; without `@ctx` a bucket takes the context of the family's defaults."""
    if not defaults:
        raise ValueError("the family has no default buckets to take the dimension from")
    dim, ctx = defaults[0].dim, defaults[0].ctx
    out = []
    for part in (p.strip() for p in spec.split(",") if p.strip()):
        rng, _, c = part.partition("@")
        lo, _, hi = rng.partition("-")
        try:
            out.append(Bucket(dim, int(lo), int(hi or lo), int(c) if c else ctx))
        except ValueError as e:
            raise ValueError(f"bad bucket {part!r} (want lo-hi[@ctx]): {e}") from None
    if not out:
        raise ValueError(f"no buckets in {spec!r}")
    return out


def key_notes(key: ProblemKey, asked_formats: Sequence[str] | None = None) -> list[str]:
    """What the key's kernel did with the request's fields, in words: which fields it ignores or fixes,
    and which formats it defaulted. Jobs and bundles carry these so a key like `pack...h0.k0.w0` or
    a heads=16 bundle's `logits...h64` is explained where it is made."""
    notes: list[str] = []
    if key.kernel == "pack":
        what = "the query quantiser" if key.formats[1:] == ("query",) else "pack"
        notes.append(f"{what} is keyed by its record format ({key.formats[0]}) on {key.arch}: heads, topk and "
                     "window do not apply and are stored as 0")
    elif key.kernel == "logits":
        notes.append(f"logits scores with the indexer's {LOGITS_HEADS} index heads of {LOGITS_HEAD_DIM} dims, "
                     "whatever the attention's local heads; window does not apply (stored as 0)")
    if not asked_formats:
        defaults = {"pack": (PACK_FORMAT,), "decode": DECODE_FORMATS, "logits": LOGITS_FORMATS}.get(key.kernel)
        if defaults and tuple(key.formats) == tuple(defaults):
            notes.append(f"formats defaulted to {', '.join(defaults)}")
    return notes
