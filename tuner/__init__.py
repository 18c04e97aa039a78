"""kvtune's tuner: the kernel families (launchers, inputs, checks), torch codecs and references,
compile/verify/time, search, warmup keys, and the engine runtime (`tuner.runtime`)."""
