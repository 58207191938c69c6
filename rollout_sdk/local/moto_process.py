"""The embedded emulator's own process: moto's server on 127.0.0.1 until its parent goes away.

:class:`~rollout_sdk.local.emulator.EmbeddedMoto` runs this as ``python -m
rollout_sdk.local.moto_process PORT`` with a fake-AWS environment of its own. moto answers
requests through boto3 sessions that read the environment (``AWS_PROFILE`` among it: a profile
the machine lacks makes every answer a 500), and a process of its own lets the emulator have the
environment it needs while the caller's stays as the caller set it.

It prints ``{"port": N}`` once serving, then serves until its standard input closes: when the
parent exits, however it exits (SIGKILL included), the pipe closes and this process stops.

DynamoDB requests are served one at a time. moto checks a condition expression and writes the
item as two steps with no lock between them (its DynamoDB models hold none), so two concurrent
conditional writes to one item can both pass: two workers would both claim one rollout (measured:
16 concurrent conditional claims of one item, 40 rounds: more than one winner in 4 rounds
without the lock, in none with it). DynamoDB itself applies each conditional write to an item
atomically; serialising the requests gives the emulator that rule. Other services are served
concurrently, as moto's own threaded server does.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment


class SerialDynamoDB:
    """WSGI middleware: DynamoDB requests one at a time (see the module's docstring)."""

    def __init__(self, app: WSGIApplication) -> None:
        self.app = app
        self._lock = threading.Lock()

    def __call__(self, environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        if not environ.get("HTTP_X_AMZ_TARGET", "").startswith("DynamoDB_"):
            return self.app(environ, start_response)
        with self._lock:
            # The whole answer is made under the lock, and the iterable closed (PEP 3333).
            answer = self.app(environ, start_response)
            try:
                return list(answer)
            finally:
                close = getattr(answer, "close", None)
                if close is not None:
                    close()


def main(argv: list[str]) -> int:
    """Serve on ``argv[0]`` (0: a free port) until standard input closes."""
    # Here: moto loads in the emulator's child process only, after its output is redirected.
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    app = SerialDynamoDB(DomainDispatcherApplication(create_backend_app))
    port = int(argv[0]) if argv else 0
    server = make_server("127.0.0.1", port, app, threaded=True, request_handler=MotoRequestHandler)
    thread = threading.Thread(target=server.serve_forever, name="moto", daemon=True)
    thread.start()
    try:
        print(json.dumps({"port": server.server_address[1]}), flush=True)
        # Nothing more goes to the parent's pipe, which nobody reads from now on.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.stdin.read()  # until the parent closes the pipe or dies
    finally:
        server.shutdown()
        thread.join()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
