"""Verify and time candidates without letting any of them kill the caller.

- `tuner.bench.protocol`: what both sides speak (Candidate, Measurement, TimingOptions, the Runner
  interface, BenchUnavailable, TIMING_SEED0).
- `tuner.bench.runner`: the parent side, `BenchRunner` (starts the child, enforces timeouts, turns
  crashes and hangs into failed trials).
- `tuner.bench.child`: the benchmark child process (verify against the reference, time by graph replay).
- `tuner.bench.simulation`: recorded timing tables and `SimulatedRunner`, which replays them.

Nothing is re-exported here, so the child (`python -m tuner.bench.child`) loads only what it uses.
"""
