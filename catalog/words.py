"""Configs in words, for people: the demo, the CLI and the dashboard say what a config does
("32-key tiles, heads on the MMA's M side, 8 warps") instead of printing its parameter dict.

Each family's parameters get a phrase; a parameter without one is shown as `NAME=value`, so a new
parameter is never hidden, only less friendly until it gets its phrase here.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

Phrase = Callable[[Any], str]

_COMMON: dict[str, Phrase] = {
    "num_warps": lambda v: f"{v} warp{'s' if v != 1 else ''}",
    "num_stages": lambda v: f"{v} pipeline stage{'s' if v != 1 else ''}",
    "backend": lambda v: {"soft": "e2m1 by integer ops", "ptx": "e2m1 by sm_100 cvt", "gfx950": "e2m1 by gfx950 cvt",
                          "lut": "e2m1 by PTX byte-permute lookups",
                          "swar": "e2m1 two bf16 elements a 32-bit integer op",
                          "bf16x2": "e2m1 by packed bf16 compares",
                          "cvt": "e4m3 by the hardware cvt"}.get(v, f"e2m1 backend {v}"),
}

_FAMILY: dict[str, dict[str, Phrase]] = {
    "pack": {
        "BLOCK_T": lambda v: f"{v} token{'s' if v != 1 else ''} a block",
        "BLOCKS_PER_PROG": lambda v: "one block a program" if v == 1 else f"{v} blocks a program, pipelined",
        "TILES_PER_PROG": lambda v: f"{v} scale tile{'s' if v != 1 else ''} a program",
    },
    "decode": {
        "MMA": lambda v: {"heads_m": "heads on the MMA's M side", "keys_m": "keys on the MMA's M side",
                          "wgmma": "sm_90 warpgroup-MMA kernel (Gluon)",
                          "wgmma_hm": "sm_90 warpgroup-MMA kernel, 64 heads on the MMA's M side",
                          "wgmma_ws": "sm_90 warpgroup-MMA kernel, warp-specialised (producer warps dequantize)",
                          "wgmma_hmws": "sm_90 warpgroup-MMA kernel, 64 heads on M, warp-specialised",
                          "wgmma_hmpv": "sm_90 warpgroup-MMA kernel, 64 heads on M, warp-specialised, "
                                        "QK and PV warpgroups",
                          "wgmma_hmpvs": "sm_90 warpgroup-MMA kernel, 64 heads on M, warp-specialised, "
                                         "QK and PV warpgroups, each tile converted once for both head groups",
                          "wgmma_wss": "sm_90 warpgroup-MMA kernel, warp-specialised, each tile converted once for "
                                       "all head groups",
                          "wgmma_wsr": "sm_90 warpgroup-MMA kernel, warp-specialised, two register-loading producers, "
                                       "three K buffers",
                          }.get(v, f"MMA {v}"),
        "BLOCK_N": lambda v: f"{v}-key tiles",
        "NUM_SPLITS": lambda v: "splits chosen by T and the SM count" if v == 0 else f"{v} split{'s' if v != 1 else ''}",
        "LISTS": lambda v: {"both": "each program walks both key lists", "apart": "each program one list's chunk",
                            "separate": "one launch a list"}.get(v, f"lists {v}"),
        "COMBINE": lambda v: "splits merged by a second kernel" if v == "kernel" else "splits merged by the last program",
        "DOT": lambda v: f"{v} dot operands",
        # (the wgmma path's warp-specialised builds: prefetched into L2 a tile further ahead)
        "PREFETCH": lambda v: "records of the tiles ahead fetched early" if v else "no prefetch",
    },
    "logits": {
        "dot": lambda v: f"{v} dot path",
        "BLOCK_N": lambda v: f"{v}-key tiles",
        "TILES": lambda v: f"{v} tile{'s' if v != 1 else ''} a program",
        "QT": lambda v: f"{v} query token{'s' if v != 1 else ''} a program",
        "HEADS": lambda v: f"{v} heads a dot",
        "PAGE_LOOKUP": lambda v: "one page lookup a tile" if v == "tile" else "a page lookup a key",
        "MMA": lambda v: {"heads_m": "heads on the MMA's M side", "keys_m": "keys on the MMA's M side"}.get(v, f"MMA {v}"),
        "PREFETCH": lambda v: "next tile loaded early" if v else "no prefetch",
        "LOADS": lambda v: "tiles by tensor descriptor (TMA)" if v == "descriptor" else "rows gathered",
    },
}


def describe(kernel: str, config: Mapping[str, Any] | None) -> str:
    """One line of phrases for a config (its parameters in a stable order: the family's first)."""
    if not config:
        return "-"
    phrases = {**_COMMON, **_FAMILY.get(kernel, {})}
    order = [k for k in _FAMILY.get(kernel, {}) if k in config] + sorted(k for k in config if k not in _FAMILY.get(kernel, {}))
    return ", ".join(phrases[k](config[k]) if k in phrases else f"{k}={config[k]}" for k in order)
