"""The HTTP API: FastAPI app factory, routes, auth, limits, the bundle read path and the dashboard. A JSON
server: it imports no torch or triton (tests/api/test_torch_free.py)."""
