"""Cross-compile signatures come from the kernels' own parameter lists: every case's signature
names its kernel's parameters in Triton's order, types every runtime one, and gives a value to
every constexpr; a runtime parameter a family has no type for fails where the case is built."""

from __future__ import annotations

import pytest

from templates import render as R
from templates.render import Rendered
from tuner.kernels import get_family
from tuner.kernels.signature import kernel_params, kernel_signature


@pytest.mark.parametrize("family", ["pack", "decode", "logits"])
def test_every_case_signature_is_its_kernels_parameter_list(family: str) -> None:
    cases = get_family(family).xcompile_cases()
    assert cases
    for case in cases:
        fn = getattr(R.load(case.rendered), case.kernel_name)
        # The order Triton's launcher and compiler index arguments by (tuner.compile's attrs).
        assert list(case.signature) == list(fn.arg_names), case.detail
        constexprs = {name for name, ty in case.signature.items() if ty == "constexpr"}
        assert constexprs == set(case.constexprs), case.detail
        runtime = [ty for ty in case.signature.values() if ty != "constexpr"]
        assert runtime and all(ty.startswith(("*", "i", "fp", "tensordesc<")) for ty in runtime), case.detail


_SOURCE = '''
import triton
import triton.language as tl
from triton.experimental.gluon import language as gl


@triton.jit
def helper(x):
    return x


@triton.jit
def kernel(a_ptr, n, scale, B: tl.constexpr, C: "tl.constexpr", W: gl.constexpr = 4):
    pass
'''


def test_params_read_constexprs_of_any_spelling() -> None:
    r = Rendered("probe.py.j2", _SOURCE)
    assert kernel_params(r, "kernel") == (("a_ptr", False), ("n", False), ("scale", False), ("B", True),
                                          ("C", True), ("W", True))
    sig = kernel_signature(r, "kernel", {"a_ptr": "*u8", "n": "i32", "scale": "fp32", "unused": "i64"})
    assert sig == {"a_ptr": "*u8", "n": "i32", "scale": "fp32", "B": "constexpr", "C": "constexpr", "W": "constexpr"}


def test_a_parameter_without_a_type_fails_where_the_case_is_built() -> None:
    r = Rendered("probe.py.j2", _SOURCE)
    with pytest.raises(KeyError, match=r"\['n', 'scale'\]"):
        kernel_signature(r, "kernel", {"a_ptr": "*u8"})
    with pytest.raises(ValueError, match="no kernel 'other'"):
        kernel_params(r, "other")
