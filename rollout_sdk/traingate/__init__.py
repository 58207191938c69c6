"""TrainGate, as the kit calls it: the one client (retries, error translation), the HTTP stack
under it (aiohttp's pool, posted to directly or through an httpx transport's seam; the answer
cap) and the outbound policy (which addresses it may connect to).

Below the agent API, which wraps the client for ``ctx.chat``, and the engine, which delivers
through it; it reads only the settings, the wire schemas, the errors and the telemetry port.
"""
