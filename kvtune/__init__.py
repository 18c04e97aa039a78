"""kvtune's app layer: the worker, the CLI and the demo. It sits above `db` (the queue, configs) and
`tuner` (render, compile, bench, search) and wires them together; nothing below imports it."""
