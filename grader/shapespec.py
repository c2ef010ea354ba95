"""A task's ``shapes.generate`` section: the declared ranges that :mod:`grader.shapes` draws from.

The model only (named dimensions with their ranges, divisibility and alignment, dtype
variables with their choices, how many tune and hidden shapes to draw), so that the task
model (:mod:`grader.task`) can hold it without importing the draw, which needs the task.
"""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_DIM = 1 << 31
Identifier = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=64)]
DtypeName = Literal["float16", "bfloat16", "float32", "float64", "int8", "int32", "int64", "uint8",
                    "bool"]


class DimRange(BaseModel):
    """One generated dimension."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    min: int = Field(1, ge=0, le=MAX_DIM)
    max: int = Field(ge=1, le=MAX_DIM)
    multiple_of: int = Field(1, ge=1, le=1 << 20, description="Every drawn value divides by it.")
    align: int = Field(1, ge=1, le=1 << 20, description="Tune values are multiples of it; hidden "
                       "ones probe just below and above its multiples.")
    allow_zero: bool = Field(False, description="Hidden shapes may hold an empty (0) size.")

    @model_validator(mode="after")
    def _nonempty(self) -> DimRange:
        if self.max < self.min:
            raise ValueError("max is below min")
        if self.lo > self.hi:
            raise ValueError(f"no multiple of {self.multiple_of} lies in [{self.min}, {self.max}]")
        return self

    @property
    def lo(self) -> int:
        m = self.multiple_of
        return -(-max(self.min, 1) // m) * m

    @property
    def hi(self) -> int:
        return self.max // self.multiple_of * self.multiple_of

    def valid(self, v: int) -> bool:
        return (v == 0 and self.allow_zero) or (self.lo <= v <= self.hi and v % self.multiple_of == 0)

    def step(self, aligned: bool) -> int:
        return math.lcm(self.align, self.multiple_of) if aligned else self.multiple_of


class GenerateSpec(BaseModel):
    """``shapes.generate``: what to draw for each evaluation."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    dims: dict[Identifier, DimRange] = Field(min_length=1, max_length=8)
    dtypes: dict[Identifier, list[DtypeName]] = Field(
        default_factory=dict, description="Dtype variables tensors may name as their dtype, "
                                          "with the choices drawn shapes cycle through.")
    tune: int = Field(2, ge=1, le=32, description="Tune shapes (A) to draw.")
    hidden: int = Field(6, ge=1, le=128, description="Hidden shapes (B) to draw; at least one "
                        "per edge case plus the larger shape are always drawn.")

    @model_validator(mode="after")
    def _names(self) -> GenerateSpec:
        both = set(self.dims) & set(self.dtypes)
        if both:
            raise ValueError(f"{sorted(both)} named both a dimension and a dtype variable")
        for var, choices in self.dtypes.items():
            if not choices or len(set(choices)) != len(choices):
                raise ValueError(f"dtype variable {var!r} needs distinct choices")
        return self
