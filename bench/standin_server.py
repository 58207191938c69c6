"""The TrainGate stand-in as a process of its own (for measurements that must not share a GIL
with it), with ``GET /health`` for :class:`bench.load.HTTPSubprocess`.

    python -m bench.standin_server --port PORT [--chat-delay SECONDS]

The callback key comes in ``BENCH_CALLBACK_KEY`` (none: any key is accepted).
"""

from __future__ import annotations

import argparse
import os
import sys

import uvicorn

from rollout_sdk.testing.standin import TrainGateStandIn


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.standin_server")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--chat-delay", type=float, default=0.0)
    args = parser.parse_args(argv)
    standin = TrainGateStandIn(
        chat_delay=args.chat_delay, callback_key=os.environ.get("BENCH_CALLBACK_KEY")
    )

    async def health() -> dict[str, str]:
        return {"status": "ok"}

    standin.app.add_api_route("/health", health, methods=["GET"])
    uvicorn.run(
        standin.app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
