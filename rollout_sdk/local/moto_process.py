"""The embedded emulator's own process: moto's server on 127.0.0.1 until its parent goes away.

:class:`~rollout_sdk.local.emulator.EmbeddedMoto` runs this as ``python -m
rollout_sdk.local.moto_process PORT`` with a fake-AWS environment of its own. moto answers
requests through boto3 sessions that read the environment (``AWS_PROFILE`` among it: a profile
the machine lacks makes every answer a 500), and a process of its own lets the emulator have the
environment it needs while the caller's stays as the caller set it.

It prints ``{"port": N}`` once serving, then serves until its standard input closes: when the
parent exits, however it exits (SIGKILL included), the pipe closes and this process stops.
"""

from __future__ import annotations

import json
import logging
import os
import sys


def main(argv: list[str]) -> int:
    """Serve on ``argv[0]`` (0: a free port) until standard input closes."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(
        ip_address="127.0.0.1", port=int(argv[0]) if argv else 0, verbose=False
    )
    server.start()
    try:
        _, port = server.get_host_and_port()
        print(json.dumps({"port": port}), flush=True)
        # Nothing more goes to the parent's pipe, which nobody reads from now on.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.stdin.read()  # until the parent closes the pipe or dies
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
