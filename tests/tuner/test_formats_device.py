"""The reference codec keeps every tensor on its input's device (a GPU in benchmarks and the bench
child). The meta device stands in for a GPU here: mixing it with a CPU tensor raises just as cuda does."""

from __future__ import annotations

import pytest
import torch

from tuner.formats import FORMATS, dequantize, quantize


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_quantize_and_dequantize_stay_on_the_input_device(fmt: str) -> None:
    f = FORMATS[fmt]
    x = torch.empty(3, f.dims, dtype=torch.bfloat16, device="meta")
    rec = quantize(x, fmt)
    assert rec.device.type == "meta" and rec.shape == (3, f.bytes_per_token) and rec.dtype == torch.uint8
    out = dequantize(rec, fmt)
    assert out.device.type == "meta" and out.shape == (3, f.dims)
