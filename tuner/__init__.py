"""kvtune's tuner: record formats, templated Triton kernels, compile/verify/time, search."""
