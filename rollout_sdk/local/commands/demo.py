"""``rollout-sdk demo``: the example agent end to end (:func:`rollout_sdk.local.demo.run_demo`)."""

from __future__ import annotations

import argparse

from rollout_sdk.project import project_path

DEFAULT_AGENT = "examples.calculator.agent:agent_loop"
DEFAULT_DATASET = "examples/calculator/dataset.jsonl"

NAME = "demo"
HELP = "run the example agent end to end on this machine"
DESCRIPTION = (
    "Start the local server and a TrainGate stand-in with a scripted model on free "
    "loopback ports, run every row of the dataset as a rollout, print a progress bar and "
    "a summary, and stop both. With --base-url, the rows go to that real endpoint "
    "instead, by the path of `rollout-sdk test`; either way the runner and the summary "
    "are test's."
)


def add_arguments(demo: argparse.ArgumentParser) -> None:
    """``demo``'s options."""
    demo.add_argument(
        "--agent",
        default=DEFAULT_AGENT,
        metavar="MODULE:ATTR",
        help=f"agent loop (default {DEFAULT_AGENT})",
    )
    demo.add_argument(
        "--dataset",
        default=DEFAULT_DATASET,
        type=project_path,
        metavar="FILE",
        help="rows read as `rollout-sdk test` reads them: .jsonl, .csv or .parquet, each row "
        "'messages' and optional 'metadata', or test's columns system_prompt, user_prompt and "
        f"ground_truth (default {DEFAULT_DATASET}, from here or the project's root)",
    )
    demo.add_argument(
        "--store",
        choices=("sqlite", "memory"),
        default="sqlite",
        help="record store of the local server (default sqlite, in a temporary folder)",
    )
    demo.add_argument(
        "--repeat", type=int, default=1, metavar="N", help="run the dataset N times (default 1)"
    )
    demo.add_argument(
        "--concurrency",
        type=int,
        default=16,
        metavar="N",
        help="rollouts in flight at once (default 16)",
    )
    demo.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="give up waiting for callbacks after this long (default 120); with --base-url, "
        "the limit of each chat call to the endpoint",
    )
    demo.add_argument(
        "--base-url",
        metavar="URL",
        help="run against this OpenAI-compatible endpoint instead of the scripted model, by "
        "the path of `rollout-sdk test` (e.g. https://api.openai.com/v1)",
    )
    demo.add_argument(
        "--model", metavar="NAME", help="with --base-url: the model (default gpt-5-mini)"
    )
    demo.add_argument(
        "--api-key",
        metavar="KEY",
        help="with --base-url: the endpoint's API key (default: OPENAI_API_KEY). A key on the "
        "command line is visible to other users in the process list: prefer OPENAI_API_KEY",
    )


def run(args: argparse.Namespace) -> int:
    """Run the demo; the exit status."""
    from rollout_sdk.local.demo import run_demo

    return run_demo(args)
