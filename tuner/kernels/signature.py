"""A kernel's cross-compile signature from one source: the kernel's own parameter list in its
rendered module, typed by its family's table of argument types.

A signature lists every parameter of the kernel in order, each with Triton's type of it
(`*bf16`, `i32`, `tensordesc<...>`) or `constexpr`. The names and their order, and which of them
are constexprs, are the template's; only the types of the runtime arguments are written down, once
per family, by name. So a parameter added to a template cannot be left out of a signature: a
runtime parameter the family's table has no type for fails where the case is built.
"""

from __future__ import annotations

import ast
from functools import lru_cache
from typing import Mapping

from templates.render import Rendered


def kernel_params(rendered: Rendered, kernel_name: str) -> tuple[tuple[str, bool], ...]:
    """(name, is_constexpr) of each parameter of `kernel_name` in `rendered`, in order.

    Read from the source's syntax tree, as Triton's `JITFunction` reads them from the function
    (its `arg_names`, and a `constexpr` annotation for its constexprs), without importing the
    module: Triton's interpreter replaces `triton.jit` functions by ones that keep no parameter
    list, and Gluon and Triton kernels read alike this way."""
    return _kernel_params(rendered, kernel_name)


@lru_cache(maxsize=128)
def _kernel_params(rendered: Rendered, kernel_name: str) -> tuple[tuple[str, bool], ...]:
    for node in ast.parse(rendered.source).body:
        if isinstance(node, ast.FunctionDef) and node.name == kernel_name:
            args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            return tuple((a.arg, _is_constexpr(a.annotation)) for a in args)
    raise ValueError(f"no kernel {kernel_name!r} in the module rendered from {rendered.template}")


def _is_constexpr(annotation: ast.expr | None) -> bool:
    # `tl.constexpr`, `gl.constexpr`, `constexpr`, or any of them as a string annotation.
    if annotation is None:
        return False
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        text = annotation.value
    else:
        text = ast.unparse(annotation)
    return text.rsplit(".", 1)[-1] == "constexpr"


def kernel_signature(rendered: Rendered, kernel_name: str, arg_types: Mapping[str, str]) -> dict[str, str]:
    """The signature `triton.compile` takes for `kernel_name` of `rendered`: every parameter in
    order, `constexpr` for the constexprs and its type in `arg_types` for every other one. Types of
    parameters the kernel does not have are ignored (one table serves all of a family's kernels)."""
    params = kernel_params(rendered, kernel_name)
    untyped = [name for name, const in params if not const and name not in arg_types]
    if untyped:
        raise KeyError(f"{kernel_name} ({rendered.template}) has parameters with no type in its family's "
                       f"argument types: {untyped}")
    return {name: "constexpr" if const else arg_types[name] for name, const in params}
