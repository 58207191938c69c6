"""The AWS Lambda runtime: boto3 clients, the composition root built once per cold start, and
one handler module per event source (``handlers/``). Nothing in the local tooling imports it."""
