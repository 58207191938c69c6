"""Writes docs/bodies.md, the reference of both protocols' request and answer bodies, from the
kit's models (:mod:`testkit.wire_docs`).

Usage: python -m bench.wire_docs
"""

from __future__ import annotations

import sys
from pathlib import Path

from testkit.wire_docs import render

OUT = Path(__file__).resolve().parents[1] / "docs" / "bodies.md"


def main() -> int:
    OUT.write_text(render() + "\n")
    print(f"wrote {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
