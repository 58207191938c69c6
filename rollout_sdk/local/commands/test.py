"""``rollout-sdk test``: v1's ``osmosis test`` options, plus --concurrency and --timeout
(:func:`rollout_sdk.local.testrun.run_test`)."""

from __future__ import annotations

import argparse

NAME = "test"
HELP = "run an agent over a dataset against a real OpenAI-compatible model"
DESCRIPTION = (
    "Run an agent loop over the rows of a dataset against a real model, through the "
    "kit's own server and worker: a local TrainGate on 127.0.0.1 forwards each chat "
    "call to an OpenAI-compatible endpoint (OpenAI by default; vLLM, SGLang, Ollama or "
    "a LiteLLM proxy with --base-url). Rows are .jsonl, .csv or .parquet with the "
    "columns system_prompt, user_prompt and ground_truth (any case); other columns go "
    "into the metadata (or, as in the demo's dataset, 'messages' and 'metadata'). Exit 0 when every row completed, 1 when one failed (or the run "
    "could not start), 2 for bad options."
)


def add_arguments(test: argparse.ArgumentParser) -> None:
    """``test``'s options: the agent and the rows, the endpoint, the run, the output."""
    agent = test.add_mutually_exclusive_group()
    agent.add_argument(
        "-m",
        "--module",
        "--agent",
        dest="module",
        metavar="MODULE:ATTR",
        help="the agent loop, e.g. examples.calculator.agent:agent_loop",
    )
    agent.add_argument(
        "--mcp",
        metavar="DIR",
        help="a folder whose main.py defines a FastMCP server: its tools, no agent code "
        "(needs the mcp extra)",
    )
    test.add_argument(
        "-d", "--dataset", required=True, metavar="FILE", help="dataset: .jsonl, .csv or .parquet"
    )
    test.add_argument(
        "--model",
        default="gpt-5-mini",
        help="model name (default gpt-5-mini); 'openai/NAME' is sent as NAME, other "
        "'provider/NAME' only with --base-url",
    )
    test.add_argument("--limit", type=int, metavar="N", help="test at most N rows (default all)")
    test.add_argument(
        "--offset", type=int, default=0, metavar="N", help="skip the first N rows (default 0)"
    )
    _add_endpoint(test)
    _add_run(test)
    _add_output(test)


def _add_endpoint(test: argparse.ArgumentParser) -> None:
    key = test.add_mutually_exclusive_group()
    key.add_argument(
        "--api-key",
        metavar="KEY",
        help="the endpoint's API key (default: OPENAI_API_KEY). A key on the command line is "
        "visible to other users in the process list: prefer OPENAI_API_KEY or --api-key-file",
    )
    key.add_argument(
        "--api-key-file",
        metavar="PATH",
        help="read the endpoint's API key from the first line of PATH (not with --api-key)",
    )
    test.add_argument(
        "--base-url",
        metavar="URL",
        help="base URL of an OpenAI-compatible API, e.g. http://localhost:8000/v1 "
        "(default https://api.openai.com/v1); user:password@ in it is sent as HTTP Basic auth "
        "instead of a key (not with --api-key or --api-key-file; OPENAI_API_KEY is then not "
        "used), and shown as ***, as are its query values",
    )


def _add_run(test: argparse.ArgumentParser) -> None:
    test.add_argument(
        "--max-turns", type=int, default=10, metavar="N", help="turn budget per row (default 10)"
    )
    test.add_argument(
        "--max-tokens", type=int, metavar="N", help="completion params: max_tokens per call"
    )
    test.add_argument(
        "--temperature", type=float, metavar="T", help="completion params: temperature"
    )
    test.add_argument(
        "--concurrency", type=int, default=1, metavar="N", help="rows at once (default 1)"
    )
    test.add_argument(
        "--timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="per chat call to the endpoint (default 300)",
    )


def _add_output(test: argparse.ArgumentParser) -> None:
    test.add_argument(
        "--debug",
        action="store_true",
        # Not "debug": that is rollout-sdk's own --debug (tracebacks), which this one implies.
        dest="test_debug",
        help="show the kit's logs and tracebacks; write ctx.log_event traces to ./test_debug",
    )
    test.add_argument(
        "-o",
        "--output",
        metavar="FILE",
        help="write the results as JSON here; - writes them to stdout, alone (the progress and "
        "the summary go to stderr), e.g. -o - | jq .summary",
    )
    test.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no progress, no summary (an error that stops the command still shows)",
    )
    test.add_argument(
        "-i",
        "--interactive",
        action="store_true",
        help="pause at each chat call to show the answer, its tool calls and the messages",
    )
    test.add_argument("--row", type=int, metavar="N", help="with --interactive: start with row N")


def run(args: argparse.Namespace) -> int:
    """Run the rows; the exit status."""
    from rollout_sdk.local import report
    from rollout_sdk.local.testrun import run_test

    if args.test_debug:
        report.DEBUG = True  # test's own --debug implies rollout-sdk's (the tracebacks)

    return run_test(args)
