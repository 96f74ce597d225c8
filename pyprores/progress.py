"""Progress on stderr, drawn by tqdm, for pyprores' ``progress(done, total)`` callbacks.

Drawn only on a terminal (or when forced with ``--progress``), so that ``--json`` output, logs and
pipes stay clean; tqdm redraws at most ten times a second and clears the line when done.
"""

from __future__ import annotations

import sys
from typing import TextIO

from tqdm import tqdm

BAR_FORMAT = "{desc} [{bar}] {n_fmt}/{total_fmt}"      # e.g. "clip.mov [#####.....] 24/48"


class ProgressBar:
    """``bar(done, total)`` updates (``total`` may be None); ``bar.finish()`` clears the line.
    ``bar.label`` may change between updates."""

    def __init__(self, label: str, stream: TextIO | None = None, enabled: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = _isatty(self.stream) if enabled is None else enabled
        self.label = label
        self._bar: tqdm | None = None

    def __call__(self, done: int, total: int | None) -> None:
        if not self.enabled:
            return
        if self._bar is None:
            self._bar = tqdm(total=total, desc=self.label, file=self.stream, leave=False,
                             mininterval=0.1, ascii=".#", ncols=len(self.label) + 50,
                             bar_format=BAR_FORMAT if total else "{desc} {n_fmt} frames")
        bar = self._bar
        if bar.desc != self.label:
            bar.set_description_str(self.label, refresh=False)
        if total and bar.total != total:
            bar.total = total
        bar.update(done - bar.n)
        if done == total:
            bar.refresh()          # the last count is always drawn

    def finish(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False
