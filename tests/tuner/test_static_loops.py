"""benchmarks/sass_loops.py's `loops`: what it reads off a disassembled kernel (innermost tile
loops, their roles and what a forward branch inside one lets a trip skip), on instruction lists
written out here, so its counts are checked without compiling anything."""

from __future__ import annotations

from benchmarks.common import SassOp
from benchmarks.sass_loops import loops


def _kernel(body: list[str], skip_from: int | None = None, skip_to: int | None = None) -> list[SassOp]:
    # A prologue, then a loop of `body` (16-byte instructions) closed by a backward branch, then
    # EXIT; a forward branch at index skip_from of the body jumps to index skip_to.
    ops = [SassOp(0x0, "MOV", "MOV", None)]
    top = 0x10
    for i, m in enumerate(body):
        addr = top + 16 * i
        target = top + 16 * skip_to if i == skip_from and skip_to is not None else None
        ops.append(SassOp(addr, m.split(".")[0], m, target))
    end = top + 16 * len(body)
    ops.append(SassOp(end, "BRA", "BRA", top))
    ops.append(SassOp(end + 16, "EXIT", "EXIT", None))
    return ops


def test_a_forward_branch_inside_a_loop_is_what_a_trip_may_skip() -> None:
    body = ["HGMMA.64x16x16.F32.BF16"] + ["FMUL"] * 300
    body[10] = "BRA"
    (lp,) = loops(_kernel(body, skip_from=10, skip_to=110), min_len=200)
    assert lp["role"] == "mma" and lp["instructions"] == len(body) + 1  # the closing branch too
    assert lp["skips"] == [99] and lp["skip"] == 99  # indices 11..109


def test_a_loop_without_forward_branches_skips_nothing() -> None:
    (lp,) = loops(_kernel(["LDG.E"] + ["IMAD"] * 250), min_len=200)
    assert lp["role"] == "producer" and lp["skip"] == 0 and lp["skips"] == []


def test_a_branch_out_of_the_loop_is_not_a_skip() -> None:
    body = ["HGMMA.64x16x16.F32.BF16"] + ["FMUL"] * 250
    body[5] = "BRA"
    ops = _kernel(body)
    exit_addr = ops[-1].addr
    ops[6] = SassOp(ops[6].addr, "BRA", "BRA", exit_addr)  # body[5]: leaves the loop (its exit test)
    (lp,) = loops(ops, min_len=200)
    assert lp["skips"] == []
