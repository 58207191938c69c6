"""The HTTP face of the rollout server: the FastAPI app, its ASGI middleware (server key,
admission) and the one table from kit exception to HTTP status and body."""
