"""The comparison pipeline: demux once, decode each packet twice, measure.

Kept apart from the CLI so that other front ends (a corpus run, a notebook)
get the same numbers.  The candidate is any object with the
``native.Session`` interface (``decode``, ``inspect``, ``device_name``,
``validation_messages``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Callable

from . import demux
from .errors import DecodeError, PyproresError
from .metrics import WORST_SLICES, PlaneStats, compare_frames, merge_stats
from .model import Frame, FrameInfo


@dataclass
class FileResult:
    """Everything measured on one file."""

    path: str
    stream: demux.StreamInfo
    frames: int
    device: str | None
    backend: str | None
    pixel_format: str
    bit_depth: int
    chroma_format: str | None
    planes: dict[str, PlaneStats]
    validation_messages: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def bitexact(self) -> bool:
        return all(p.identical for p in self.planes.values())

    @property
    def max_abs(self) -> int:
        return max((p.max_abs for p in self.planes.values()), default=0)

    def passed(self, max_dev: int) -> bool:
        return self.max_abs <= max_dev


@dataclass
class Summary:
    """All files of one run plus their total (per-plane figures merged)."""

    files: list[FileResult]
    total: dict[str, PlaneStats]
    device: str | None
    backend: str | None
    max_dev: int

    @property
    def frames(self) -> int:
        return sum(f.frames for f in self.files)

    @property
    def bitexact(self) -> bool:
        return all(f.bitexact for f in self.files)

    @property
    def passed(self) -> bool:
        return all(f.passed(self.max_dev) for f in self.files)


Progress = Callable[[int, "int | None"], None]


def compare_file(path: str | os.PathLike, session, frames: int | None = None,
                 worst_n: int = WORST_SLICES, progress: Progress | None = None,
                 on_frame: "Callable[[int, Frame, Frame], None] | None" = None) -> FileResult:
    """Compare ``session``'s decode of ``path`` with FFmpeg's software decode.

    Stops after ``frames`` frames when given, without reading further, so a
    file damaged past that point can still be checked up to it.
    ``on_frame(n, reference, candidate)`` sees every decoded pair (the
    conformance run hashes them).
    """
    path = os.fspath(path)
    notes: list[str] = []
    seen_messages = len(session.validation_messages)
    with demux.open(path) as src:
        info = src.info
        expected = frames if info.frames is None else min(frames or info.frames, info.frames)
        stats: dict[str, PlaneStats] | None = None
        n = 0
        ref = None
        chroma = None
        for packet, ref in src.pairs():
            try:
                header: FrameInfo = session.inspect(packet, info.codec_tag)
                cand = session.decode(packet, info.codec_tag)
            except PyproresError as e:   # same type (the CLI treats DeviceError apart), with context
                raise type(e)(f"{path}, frame {n}: the candidate decoder failed: {e}") from e
            chroma = header.chroma_format
            if cand.pix_fmt != ref.pix_fmt:
                note = f"candidate pixel format {cand.pix_fmt} differs from reference {ref.pix_fmt}"
                notes += [note] if note not in notes else []
            if ref.corrupt:
                notes.append(f"frame {n}: the software decoder flagged its output as corrupt")
            try:
                frame_stats = compare_frames(ref, cand, header, n, worst_n)
            except ValueError as e:
                raise DecodeError(f"{path}, frame {n}: candidate output cannot be compared: {e}") from e
            stats = merge_stats(stats, frame_stats)
            if on_frame is not None:
                on_frame(n, ref, cand)
            n += 1
            if progress is not None:
                progress(n, expected)
            if frames is not None and n >= frames:
                break   # before the next packet is read: damage past here stays unread
    stats = {k: _tag_file(v, path) for k, v in (stats or {}).items()}
    return FileResult(
        path=path, stream=info, frames=n, device=getattr(session, "device_name", None),
        backend=getattr(session, "backend", None),
        pixel_format=ref.pix_fmt if ref is not None else (info.pix_fmt or ""),
        bit_depth=ref.bit_depth if ref is not None else 0, chroma_format=chroma, planes=stats,
        validation_messages=list(session.validation_messages[seen_messages:]), notes=notes)


def summarize(results: list[FileResult], max_dev: int = 0) -> Summary:
    """Merge per-file results into a total (slice grids are per file only)."""
    total: dict[str, PlaneStats] | None = None
    for r in results:
        total = merge_stats(total, r.planes, keep_grid=False)
    first = results[0] if results else None
    return Summary(files=results, total=total or {}, device=first.device if first else None,
                   backend=first.backend if first else None, max_dev=max_dev)


def _tag_file(stats: PlaneStats, path: str) -> PlaneStats:
    """Label worst slices with their file, so a multi-file total stays readable."""
    stats.worst = [replace(w, file=path) for w in stats.worst]
    return stats
