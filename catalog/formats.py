"""The cache record formats of FORMATS.md as data: sizes, tiles, scales, the paged layout's sizes.

Torch-free, so the API and the database can name and size records; the torch reference codec that
writes and reads them is `tuner.formats`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

ElemKind = Literal["e2m1", "e4m3"]
ScaleKind = Literal["e4m3", "ue8m0", "fp32"]


@dataclass(frozen=True)
class RecordFormat:
    """One token's record: `data_bytes` of elements, then (in the page's scale area) `scale_bytes`.

    `qdims` dims are quantized in tiles of `tile` dims with one scale each; the remaining
    `dims - qdims` dims (only `fp8_584`) are stored as bf16 after the quantized bytes.
    """

    name: str
    dims: int
    qdims: int
    elem: ElemKind
    scale: ScaleKind
    tile: int
    data_bytes: int
    scale_bytes: int
    page_align: int

    @property
    def bytes_per_token(self) -> int:
        return self.data_bytes + self.scale_bytes

    @property
    def n_tiles(self) -> int:
        return self.qdims // self.tile

    @property
    def bf16_dims(self) -> int:
        return self.dims - self.qdims

    @property
    def scale_pad(self) -> int:
        """Zero bytes at the end of the scale row (fp8_584 keeps 7 scales in 8 bytes)."""
        return 0 if self.scale == "fp32" else self.scale_bytes - self.n_tiles

    @property
    def elem_bytes(self) -> int:
        """Bytes of quantized elements in the data row (before any bf16 tail)."""
        return self.qdims // 2 if self.elem == "e2m1" else self.qdims


FORMATS: dict[str, RecordFormat] = {
    f.name: f
    for f in (
        RecordFormat("nvfp4_288", 512, 512, "e2m1", "e4m3", 16, 256, 32, 512),
        RecordFormat("fp8_528", 512, 512, "e4m3", "ue8m0", 32, 512, 16, 512),
        RecordFormat("fp8_584", 512, 448, "e4m3", "ue8m0", 64, 576, 8, 576),
        RecordFormat("mxfp4_68", 128, 128, "e2m1", "ue8m0", 32, 64, 4, 1),
        RecordFormat("fp8_132", 128, 128, "e4m3", "fp32", 128, 128, 4, 1),
    )
}


def get_format(fmt: str | RecordFormat) -> RecordFormat:
    if isinstance(fmt, RecordFormat):
        return fmt
    try:
        return FORMATS[fmt]
    except KeyError:
        raise ValueError(f"unknown record format {fmt!r}; known: {sorted(FORMATS)}") from None


def page_bytes(fmt: str | RecordFormat, page_size: int) -> int:
    f = get_format(fmt)
    raw = page_size * f.bytes_per_token
    return -(-raw // f.page_align) * f.page_align
