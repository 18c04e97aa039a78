"""The torch-free catalog: core types, record formats, targets, search spaces, key rules, settings and
the kernel families' specs. `api` and `db` may import it; it imports no torch, triton or tuner
(tests/test_layers.py holds the rule)."""
