"""Request bodies and query shapes. Static bounds here catch what is absurd in any deployment;
the deployment's own limits (Settings) are checked in api/validation.py."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

Int = Annotated[int, Field(strict=True)]  # 16, not "16", 16.0 or true
SEARCHES = ("tpe", "random", "grid")


class BucketIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dim: Annotated[str, Field(min_length=1, max_length=8)]
    lo: Annotated[int, Field(strict=True, ge=1)]
    hi: Annotated[int, Field(strict=True, ge=1)]
    ctx: Annotated[int, Field(strict=True, ge=0)] = 0


class TuneRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kernel: Annotated[str, Field(min_length=1, max_length=32)]
    arch: Annotated[str, Field(min_length=1, max_length=32, description="a target name: sm_90, sm_100, gfx942, gfx950, interp")]
    heads: Annotated[int, Field(strict=True, ge=1)]
    topk: Annotated[int, Field(strict=True, ge=1)]
    window: Annotated[int, Field(strict=True, ge=0)]
    formats: Annotated[list[Annotated[str, Field(max_length=32)]] | None, Field(max_length=4)] = None
    buckets: Annotated[list[BucketIn] | None, Field(min_length=1, max_length=256)] = None
    trials: Annotated[int, Field(strict=True, ge=1)] = 32
    search: Literal["tpe", "random", "grid"] = "tpe"
    time_budget_s: Annotated[float | None, Field(gt=0, allow_inf_nan=False)] = None
    seed: Annotated[int, Field(strict=True, ge=0, le=2**31 - 1)] = 0
    # Distributed mode: every free worker of `arch` may join the job and share its Optuna studies;
    # `trials` stays the budget per bucket for the whole job. `max_workers` caps the participants.
    distributed: Annotated[bool, Field(strict=True)] = False
    max_workers: Annotated[int | None, Field(strict=True, ge=1)] = None
