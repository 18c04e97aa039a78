"""Search spaces as data: typed parameters with their choices and default, serialisable to JSON next
to the values chosen (Optuna's distributions, Helion's ConfigSpec).

Parameters marked `render=True` are template (variant) choices and produce a different generated
module; the rest are launch-time constexprs and `num_warps`/`num_stages`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Sequence

from catalog.core import Config


@dataclass(frozen=True)
class Param:
    name: str
    choices: tuple[Any, ...]
    default: Any
    render: bool = False  # a template choice (changes the generated source) or a launch param

    def __post_init__(self) -> None:
        if self.default not in self.choices:
            raise ValueError(f"default {self.default!r} of {self.name} is not among its choices {self.choices}")

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "choices": list(self.choices), "default": self.default, "render": self.render}


@dataclass(frozen=True)
class Space:
    params: tuple[Param, ...]
    # A config is feasible when every constraint returns None; otherwise the string says why not.
    constraints: tuple[Callable[[Config], str | None], ...] = ()

    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def default(self) -> Config:
        return Config.from_dict({p.name: p.default for p in self.params})

    def infeasible(self, config: Config) -> str | None:
        d = config.as_dict()
        for p in self.params:
            if p.name not in d:
                return f"missing parameter {p.name}"
            if d[p.name] not in p.choices:
                return f"{p.name}={d[p.name]!r} is not among {list(p.choices)}"
        extra = set(d) - set(self.names())
        if extra:
            return f"unknown parameters {sorted(extra)}"
        for c in self.constraints:
            why = c(config)
            if why:
                return why
        return None

    def grid(self) -> Iterator[Config]:
        """Every feasible config (the exhaustive grid)."""
        for values in itertools.product(*(p.choices for p in self.params)):
            cfg = Config.from_dict(dict(zip(self.names(), values)))
            if self.infeasible(cfg) is None:
                yield cfg

    def to_json(self) -> list[dict[str, Any]]:
        return [p.to_json() for p in self.params]

    def restrict(self, choices: Mapping[str, Sequence[Any]]) -> "Space":
        """The same space with fewer choices for some parameters (same constraints): a sub-grid
        small enough to measure whole. Each subset must keep the parameter's default."""
        unknown = set(choices) - set(self.names())
        if unknown:
            raise ValueError(f"unknown parameters {sorted(unknown)}; known: {list(self.names())}")
        params = []
        for p in self.params:
            if p.name not in choices:
                params.append(p)
                continue
            keep = tuple(c for c in p.choices if c in tuple(choices[p.name]))
            extra = [c for c in choices[p.name] if c not in p.choices]
            if extra:
                raise ValueError(f"{p.name}: {extra} are not among {list(p.choices)}")
            if p.default not in keep:
                raise ValueError(f"{p.name}: a restriction must keep the default {p.default!r}")
            params.append(Param(p.name, keep, p.default, p.render))
        return Space(params=tuple(params), constraints=self.constraints)
