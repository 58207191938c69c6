"""The machine a measurement ran on, for the benchmark results and the reliability report."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def _memory_mib() -> int:
    try:
        for line in Path("/proc/meminfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 1024)
    except OSError:
        pass
    return 0


def machine() -> dict[str, Any]:
    """CPU model and cores, memory, kernel and Python of this machine."""
    return {
        "cpu_model": _cpu_model(),
        "cores": os.cpu_count(),
        "memory_mib": _memory_mib(),
        "kernel": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
    }


def machine_line(info: dict[str, Any] | None = None) -> str:
    """:func:`machine` in one line: cores x CPU model; kernel; Python."""
    info = info or machine()
    return f"{info['cores']} x {info['cpu_model']}; {info['kernel']}; Python {info['python']}"
