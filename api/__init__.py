"""The HTTP API (FastAPI app factory, routes, auth, limits) and the engine-side client."""
