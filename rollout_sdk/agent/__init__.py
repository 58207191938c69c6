"""The agent-author API: the loop, its context and LLM client, tools, validation, the registry.

Everything here is light: importing it loads pydantic and the standard library, never a web
framework, an AWS SDK, SQLite or an HTTP client (tests/unit/test_imports.py holds it to that).
"""
