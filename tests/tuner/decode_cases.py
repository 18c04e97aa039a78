"""Inputs both decode test modules use (test_decode.py: the Triton kernels; test_decode_wgmma.py:
sm_90's Gluon kernels)."""

from __future__ import annotations

import torch

from tuner.kernels.decode import make_decode_inputs

# Small enough for the interpreter; topk and window are not multiples of any BLOCK_N.
T, H, TOPK, WINDOW = 3, 16, 40, 20


def small_inputs(comp: str, win: str, device: str, sink: bool, seed: int = 0) -> dict:
    inp = make_decode_inputs(comp, win, T, H, TOPK, WINDOW, device, seed, page_size=16, win_page_size=8, sink=sink)
    # Token 1 has no key at all; token 2 loses the tail of its compressed list (a short sequence).
    inp["topk_idx"][1] = -1
    inp["window_idx"][1] = -1
    inp["topk_idx"][2, 25:] = -1
    return inp


def poison(inp: dict) -> None:
    """NaN over both outputs, so a kernel that skips a value fails the check."""
    inp["out"][0].fill_(float("nan"))
    inp["out"][1].fill_(float("nan"))


def masked_past(idx: torch.Tensor, lens: torch.Tensor, seq_tokens: int) -> torch.Tensor:
    """The index lists with every slot past each sequence's length -1 (lens: one a sequence of
    seq_tokens tokens), as a kernel that takes the lengths must read them."""
    per_token = lens.repeat_interleave(seq_tokens)
    return torch.where(torch.arange(idx.shape[1], device=idx.device)[None, :] < per_token[:, None], idx, -1)
