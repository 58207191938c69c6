"""A local TrainGate that forwards each chat call to an OpenAI-compatible endpoint.

``rollout-sdk test`` (and ``rollout-sdk demo --base-url``) run the agent through the kit's real
server and worker; this package stands where TrainGate would, in three rooms:

- :mod:`~rollout_sdk.local.forward.endpoint`: where the calls go and what is sent there (the
  URL, the credentials, never shown, the model name, the token limit's name, the OpenAI body);
- :mod:`~rollout_sdk.local.forward.failures`: what a failed call means, named with its fix, and
  which failures every row would hit (they stop the run);
- :mod:`~rollout_sdk.local.forward.app`: :class:`ForwardingTrainGate`, the FastAPI app that
  forwards the chat calls and records each rollout's final response for the runner.

Each name is imported on first use, so reading a key file or resolving the endpoint loads
neither FastAPI nor the HTTP stack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rollout_sdk._lazy import lazy_exports

if TYPE_CHECKING:
    from rollout_sdk.local.forward.app import (
        FINAL_STATUS,
        TOOLS_WAIT_SECONDS,
        ForwardingTrainGate,
        Interactor,
        Slot,
    )
    from rollout_sdk.local.forward.endpoint import (
        DEFAULT_MODEL,
        DEFAULT_TIMEOUT_SECONDS,
        DROPPED,
        KIT_FILLERS,
        MAX_KEY_LINE,
        OPENAI_BASE_URL,
        TOKEN_FIELDS,
        Endpoint,
        map_chat_body,
        other_token_field,
        read_key_file,
        resolve_endpoint,
        resolve_model,
    )
    from rollout_sdk.local.forward.failures import (
        ABORTED,
        EndpointFailure,
        bad_answer,
        classify_exception,
        classify_status,
    )

__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "rollout_sdk.local.forward.endpoint": (
            "DEFAULT_MODEL",
            "DEFAULT_TIMEOUT_SECONDS",
            "DROPPED",
            "KIT_FILLERS",
            "MAX_KEY_LINE",
            "OPENAI_BASE_URL",
            "TOKEN_FIELDS",
            "Endpoint",
            "map_chat_body",
            "other_token_field",
            "read_key_file",
            "resolve_endpoint",
            "resolve_model",
        ),
        "rollout_sdk.local.forward.failures": (
            "ABORTED",
            "EndpointFailure",
            "bad_answer",
            "classify_exception",
            "classify_status",
        ),
        "rollout_sdk.local.forward.app": (
            "FINAL_STATUS",
            "TOOLS_WAIT_SECONDS",
            "ForwardingTrainGate",
            "Interactor",
            "Slot",
        ),
    },
)

__all__ = [
    "ABORTED",
    "DEFAULT_MODEL",
    "DEFAULT_TIMEOUT_SECONDS",
    "DROPPED",
    "FINAL_STATUS",
    "KIT_FILLERS",
    "MAX_KEY_LINE",
    "OPENAI_BASE_URL",
    "TOKEN_FIELDS",
    "TOOLS_WAIT_SECONDS",
    "Endpoint",
    "EndpointFailure",
    "ForwardingTrainGate",
    "Interactor",
    "Slot",
    "bad_answer",
    "classify_exception",
    "classify_status",
    "map_chat_body",
    "other_token_field",
    "read_key_file",
    "resolve_endpoint",
    "resolve_model",
]
