"""``python -m rollout_sdk`` is ``rollout-sdk``."""

from __future__ import annotations

import sys

from rollout_sdk.local.cli import main

sys.exit(main())
