"""One module per event source of the Lambda functions, each over the one
:class:`~rollout_sdk.aws.runtime.LambdaRuntime`: parse the event, call the engine, shape the
answer. ``handler.py`` at the top of the repository names them as the template's entry points.

Each module imports its libraries (Mangum, Powertools' batch processing and data classes) when
first called, so a function's cold start pays only for its own event source.
"""
