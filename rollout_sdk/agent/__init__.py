"""The agent-author API: the loop, its context and LLM client, tools, validation, the registry.

Everything here is light: importing it loads pydantic and the standard library, never a web
framework, an AWS SDK, SQLite or an HTTP client (tests/unit/test_imports.py holds it to that).
Authors import these names from :mod:`rollout_sdk` (the v1 names, resolved lazily there); this
package does not re-export them, so the public names live in one list.
"""
