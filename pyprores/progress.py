"""A minimal progress bar on stderr, so long files show they are moving.

Drawn only on a terminal (or when forced) so that logs and pipes stay clean,
and redrawn at most ten times a second to keep its cost negligible.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressBar:
    """``bar(done, total)`` updates; ``bar.finish()`` clears the line."""

    def __init__(self, label: str, stream: TextIO | None = None, enabled: bool | None = None,
                 width: int = 30) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = _isatty(self.stream) if enabled is None else enabled
        self.label = label
        self.width = width
        self._last = 0.0
        self._drawn = 0   # width of the widest line drawn so far

    def __call__(self, done: int, total: int | None) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < 0.1 and done != total:
            return
        self._last = now
        if total:
            filled = self.width * min(done, total) // total
            bar = f"[{'#' * filled}{'.' * (self.width - filled)}] {done}/{total}"
        else:
            bar = f"{done} frames"
        line = f"{self.label} {bar}"
        self.stream.write("\r" + line.ljust(self._drawn))
        self.stream.flush()
        self._drawn = max(self._drawn, len(line))

    def finish(self) -> None:
        if self._drawn:   # blank the line with spaces: no terminal escapes in logs
            self.stream.write("\r" + " " * self._drawn + "\r")
            self.stream.flush()
            self._drawn = 0


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
