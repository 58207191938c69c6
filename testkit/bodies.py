"""The calculator exchange: the init body of a calculator rollout, and questions it can solve."""

from __future__ import annotations

import random
from typing import Any

SYSTEM_PROMPT = "You are a careful calculator. Use the tools."
COMPLETION_PARAMS: dict[str, Any] = {"temperature": 0.0, "max_tokens": 128}


def first_messages(question: str) -> list[dict[str, Any]]:
    """The conversation a calculator rollout starts with."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": question},
    ]


def calculator_body(
    rollout_id: str,
    server_url: str,
    *,
    question: str = "What is 6 * 7?",
    truth: str = "42",
    callback_key: str | None = None,
    metadata: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A ``RolloutRequest`` body for the calculator agent (with ``api_key`` when a
    ``callback_key`` is given); ``extra`` adds or replaces top-level fields."""
    body: dict[str, Any] = {
        "rollout_id": rollout_id,
        "server_url": server_url,
        "messages": first_messages(question),
        "completion_params": dict(COMPLETION_PARAMS),
        "metadata": {"ground_truth": truth, **(metadata or {})},
    }
    if callback_key is not None:
        body["api_key"] = callback_key
    return {**body, **extra}


def make_questions(count: int, *, seed: int = 7) -> list[tuple[str, str]]:
    """``count`` (question, ground truth) pairs the scripted model and calculator can solve."""
    rng = random.Random(seed)
    questions = []
    for _ in range(count):
        op = rng.choice("+-*/")
        b = rng.randint(1, 99)
        if op == "/":
            answer = rng.randint(1, 99)
            a = answer * b
        else:
            a = rng.randint(1, 999)
            answer = {"+": a + b, "-": a - b, "*": a * b}[op]
        questions.append((f"What is {a} {op} {b}?", str(answer)))
    return questions
