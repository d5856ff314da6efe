"""The machine's load average, printed under every table the benchmarks print: figures from a busy
machine are slower, and a reader can only tell from this line (`os.getloadavg()`: 1, 5, 15 minutes)."""

from __future__ import annotations

import os


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average: {one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} cores)"
