"""Local tooling: the ``rollout-sdk`` command, the local server, the demo, ``invoke`` of the Lambda
handlers against the embedded emulator, and platform registration. Never shipped to Lambda."""
