"""The AWS Lambda runtime: boto3 clients, the composition root built once per cold start, the
cost estimate's Lambda side (``metering.py``), CloudWatch telemetry, and one handler module per
event source (``handlers/``). Nothing in the local tooling imports it (a layering contract in
``pyproject.toml`` holds ``local/`` and ``aws/`` apart)."""
