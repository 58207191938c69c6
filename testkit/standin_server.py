"""The TrainGate stand-in as a process of its own (for measurements that must not share a GIL
with it), with ``GET /health`` for :class:`testkit.processes.HTTPSubprocess`.

    python -m testkit.standin_server --port PORT [--host HOST] [--chat-delay SECONDS]

The callback key comes in ``STANDIN_CALLBACK_KEY`` (not in argv, so ``ps`` does not show it;
none: any key is accepted, on loopback only). :func:`standin_process` starts it on a free
loopback port. ``--host 0.0.0.0`` serves other machines too (a deployed stack's functions, for
the cloud suite: docs/aws.md), and then needs the key: it guards the chat and callback
endpoints and ``GET /standin/rollouts/{rollout_id}``, which reads back what was received.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
from pathlib import Path

import uvicorn

from rollout_sdk.testing.standin import TrainGateStandIn
from rollout_sdk.testing.threads import free_port
from testkit import REPO_ROOT
from testkit.processes import HTTPSubprocess

KEY_VARIABLE = "STANDIN_CALLBACK_KEY"


def standin_process(
    log_dir: str | Path, *, callback_key: str | None = None, chat_delay: float = 0.0
) -> HTTPSubprocess:
    """The stand-in in its own process on a free loopback port (not started)."""
    port = free_port()
    env = {"PYTHONPATH": str(REPO_ROOT)}
    if callback_key is not None:
        env[KEY_VARIABLE] = callback_key
    return HTTPSubprocess(
        [
            sys.executable,
            "-m",
            "testkit.standin_server",
            "--port",
            str(port),
            "--chat-delay",
            f"{chat_delay:g}",
        ],
        url=f"http://127.0.0.1:{port}",
        log_path=Path(log_dir) / "standin.log",
        env=env,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testkit.standin_server")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; 0.0.0.0: all)"
    )
    parser.add_argument("--chat-delay", type=float, default=0.0)
    args = parser.parse_args(argv)
    key = os.environ.get(KEY_VARIABLE) or None
    if key is None and not _loopback(args.host):
        parser.error(
            f"--host {args.host} serves other machines: set {KEY_VARIABLE} to a callback key "
            "first (without one, anyone who finds the port could post and read results)"
        )
    standin = TrainGateStandIn(chat_delay=args.chat_delay, callback_key=key)

    async def health() -> dict[str, str]:
        return {"status": "ok"}

    standin.app.add_api_route("/health", health, methods=["GET"])
    print(f"TrainGate stand-in on http://{args.host}:{args.port}", flush=True)
    uvicorn.run(standin.app, host=args.host, port=args.port, log_level="warning", access_log=False)
    return 0


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


if __name__ == "__main__":
    sys.exit(main())
