"""Local tooling: the ``rollout-sdk`` command, the local server, the demo, ``invoke`` of the Lambda
handlers against the embedded emulator, platform registration, and ``test`` (an agent over a
dataset against a real OpenAI-compatible model). Never shipped to Lambda."""
