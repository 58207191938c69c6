"""The calculator's tools as a FastMCP server: served with ``--mcp examples/mcp_calculator``."""
