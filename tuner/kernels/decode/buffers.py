"""The buffers the wgmma decode builds keep per device across launches: the shared tiles of
WGMMA_SHARE_MMAS and the in-kernel merge's barrier words (COMBINE=fused). Kept, not allocated a
launch, because their words carry state from one launch to the next and CUDA graphs capture them.
And where that merge may run at all (`merge_fits`)."""

from __future__ import annotations

import torch

from catalog.families.decode_wgmma import WGMMA_BLOCK_N
from tuner.kernels.base import sm_count

# Per (device, head groups), the shared-tile buffers of WGMMA_SHARE_MMAS (their kernels' share_ws,
# share_cnt, share_rdy): tiles' bf16 copies and two int32 words a tile. The words are zeroed once and
# only grow (the kernel needs no reset, so CUDA graphs replay it): every launch adds the group count
# to each counter it uses, so launches of another group count get buffers of their own (a counter
# they moved by 2 would hand a group of 8 the wrong converter). A launch with more tiles gets larger
# buffers, and the smaller ones stay alive for graphs that captured them. One stream at a time: two
# launches in flight at once would share the words.
_SHARED_TILES: dict[tuple[torch.device, int], list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]] = {}


def shared_tiles(n_tiles: int, groups: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Buffers for `n_tiles` shared tiles of launches of `groups` head groups on `device` (the
    largest so far if it holds them)."""
    held = _SHARED_TILES.setdefault((device, groups), [])
    if not held or held[-1][1].numel() < n_tiles:
        n = max(n_tiles, 2 * held[-1][1].numel() if held else 0)
        held.append((torch.empty(n, 4 * WGMMA_BLOCK_N * 128, dtype=torch.bfloat16, device=device),
                     torch.zeros(n, dtype=torch.int32, device=device), torch.zeros(n, dtype=torch.int32, device=device)))
    return held[-1]


# Per device, the merge's barrier words (two int32 a token and head group: the arrivals, which the
# last to arrive resets, and a flag it flips): zeroed once, and no launch needs them reset, so CUDA
# graphs replay them. A launch with more tokens gets a larger tensor; the smaller ones stay alive for
# graphs that captured them. One stream at a time, as the shared tiles' words.
_MERGE_COUNTERS: dict[torch.device, list[torch.Tensor]] = {}


def merge_counters(n: int, device: torch.device) -> torch.Tensor:
    """Barrier words for `n` (token, head group) merges on `device` (the largest so far if it holds them)."""
    held = _MERGE_COUNTERS.setdefault(device, [])
    if not held or held[-1].numel() < 2 * n:
        size = max(2 * n, 2 * held[-1].numel() if held else 0)  # at least double, as shared_tiles grows
        held.append(torch.zeros(size, dtype=torch.int32, device=device))
    return held[-1]


# The most partials a token's programs merge together (MERGE_S rows of one block load: 16 x 16 heads x
# 32 dims, 64 a thread at 4 warps).
MERGE_MAX_PARTS = 16


def merge_fits(parts: int, programs: int, device: torch.device) -> bool:
    """Whether a launch's programs may merge their partials themselves (COMBINE=fused on the
    heads-on-N builds): each waits for its token's others, so every program of the grid must be
    resident at once (one an SM: the path's shared memory) -- no more programs than SMs -- and a
    token's partials must fit the merge's one block load (MERGE_MAX_PARTS). Otherwise
    decode_combine merges them."""
    return 1 < parts <= MERGE_MAX_PARTS and programs <= sm_count(device)
