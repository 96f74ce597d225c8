"""The comparison pipeline: demux once, decode each packet twice, measure.

Kept apart from the CLI so that other front ends (a corpus run, a notebook)
get the same numbers.  The candidate is any object with the
``native.Session`` interface (``decode``, ``inspect``, ``device_name``,
``validation_messages``); a Vulkan ``native.Session`` also streams, several
frames in flight while the reference is decoded and the frames measured
(:mod:`pyprores.decode.pipeline`), with the same results.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Callable

from ..decode import demux
from ..errors import DecodeError, PyproresError
from ..geometry import plane_shape, slice_rect
from .metrics import WORST_SLICES, PlaneStats, compare_frames, merge_stats
from ..model import Frame, FrameInfo
from ..decode.pipeline import DEFAULT_IN_FLIGHT, CandidateFrames


@dataclass
class Concealment:
    """A frame that either decoder flagged as damaged, and the slices each
    concealed ((picture, slice) pairs; None where it cannot say)."""

    frame: int
    reference_flagged: bool
    candidate_flagged: bool
    reference_slices: list | None
    candidate_slices: list | None
    excluded_slices: list          # concealed by both: left out of the statistics

    @property
    def agrees(self) -> bool:
        return self.reference_flagged == self.candidate_flagged


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
    concealed: list[Concealment] = field(default_factory=list)

    @property
    def bitexact(self) -> bool:
        return all(p.identical for p in self.planes.values())

    @property
    def max_abs(self) -> int:
        return max((p.max_abs for p in self.planes.values()), default=0)

    @property
    def concealment_agrees(self) -> bool:
        """Both decoders flagged the same frames as damaged."""
        return all(c.agrees for c in self.concealed)

    def passed(self, max_dev: int) -> bool:
        return self.max_abs <= max_dev and self.concealment_agrees


@dataclass
class Summary:
    """All files of one run plus their total (per-plane figures merged)."""

    files: list[FileResult]
    total: dict[str, PlaneStats]
    device: str | None
    backend: str | None
    max_dev: int
    ffmpeg: dict | None = None      # the FFmpeg build (pyprores.builds.describe()), when known

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
                 on_frame: "Callable[[int, Frame, Frame], None] | None" = None,
                 in_flight: int = DEFAULT_IN_FLIGHT) -> FileResult:
    """Compare ``session``'s decode of ``path`` with FFmpeg's software decode.

    Stops after ``frames`` frames when given, without reading further, so a
    file damaged past that point can still be checked up to it.
    ``on_frame(n, reference, candidate)`` sees every decoded pair (the
    conformance run hashes them). ``in_flight``: frames decoding at once
    when the session streams (1: one frame per call); the result does not
    depend on it.
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
        concealed: list[Concealment] = []
        slices_of = _SoftwareConcealment()
        candidates = CandidateFrames(session, src.pairs(), info.codec_tag, limit=frames,
                                     max_in_flight=in_flight, frames=info.frames)
        try:
            for item in candidates:
                packet, ref = item.packet, item.reference
                if item.error is not None:  # same type (the CLI treats DeviceError apart), with context
                    e = item.error
                    raise type(e)(f"{path}, frame {n}: the candidate decoder failed: {e}") from e
                header: FrameInfo = item.header
                cand: Frame = item.candidate
                chroma = header.chroma_format
                if cand.pix_fmt != ref.pix_fmt:
                    note = f"candidate pixel format {cand.pix_fmt} differs from reference {ref.pix_fmt}"
                    notes += [note] if note not in notes else []
                if ref.corrupt or cand.corrupt:
                    c = _concealment(n, packet, info.codec_tag, ref, cand, slices_of)
                    concealed.append(c)
                    notes.append(_concealment_note(c))
                    if c.excluded_slices:
                        cand = _exclude(ref, cand, header, c.excluded_slices)
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
                    break   # CandidateFrames read no packet past this one: damage there stays unread
        finally:
            candidates.close()      # the frames in flight, before the file closes
            slices_of.close()
    stats = {k: _tag_file(v, path) for k, v in (stats or {}).items()}
    return FileResult(
        path=path, stream=info, frames=n, device=getattr(session, "device_name", None),
        backend=getattr(session, "backend", None),
        pixel_format=ref.pix_fmt if ref is not None else (info.pix_fmt or ""),
        bit_depth=ref.bit_depth if ref is not None else 0, chroma_format=chroma, planes=stats,
        validation_messages=list(session.validation_messages[seen_messages:]), notes=notes,
        concealed=concealed)


def summarize(results: list[FileResult], max_dev: int = 0) -> Summary:
    """Merge per-file results into a total (slice grids are per file only)."""
    total: dict[str, PlaneStats] | None = None
    for r in results:
        total = merge_stats(total, r.planes, keep_grid=False)
    first = results[0] if results else None
    return Summary(files=results, total=total or {}, device=first.device if first else None,
                   backend=first.backend if first else None, max_dev=max_dev)


class _SoftwareConcealment:
    """Which slices FFmpeg's software decoder concealed in a frame it flagged:
    PyAV's reference frames do not say, so such a packet is decoded again by
    pyprores.decode.native's software session (opened on first use), which does."""

    def __init__(self) -> None:
        self.session = None
        self.unavailable = False

    def __call__(self, packet: bytes, tag: str) -> list | None:
        if self.unavailable:
            return None
        try:
            if self.session is None:
                from ..decode.candidate import open_session
                self.session = open_session("software", threads=1)
            frame = self.session.decode(packet, tag)
        except PyproresError:
            self.unavailable = self.session is None
            return None
        return [list(x) for x in frame.concealed or ()]

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None


def _concealment(n: int, packet: bytes, tag: str, ref: Frame, cand: Frame,
                 slices_of: "_SoftwareConcealment") -> Concealment:
    rs = [list(x) for x in ref.concealed] if ref.concealed is not None else None
    if rs is None and ref.corrupt:
        rs = slices_of(packet, tag)
    rs = rs if rs is not None or ref.corrupt else []
    cs = [list(x) for x in cand.concealed] if cand.concealed is not None else None
    both = sorted({tuple(x) for x in rs or ()} & {tuple(x) for x in cs or ()})
    return Concealment(frame=n, reference_flagged=ref.corrupt, candidate_flagged=cand.corrupt,
                       reference_slices=rs, candidate_slices=cs,
                       excluded_slices=[list(x) for x in both])


def _concealment_note(c: Concealment) -> str:
    def says(name: str, flagged: bool, slices: list | None) -> str:
        if not flagged:
            return f"the {name} did not flag it"
        which = "" if slices is None else \
            f" ({len(slices)} concealed slice{'s' if len(slices) != 1 else ''})"
        return f"the {name} flagged it{which}"
    text = (f"frame {c.frame} is damaged: {says('software decoder', c.reference_flagged, c.reference_slices)}, "
            f"{says('candidate', c.candidate_flagged, c.candidate_slices)}")
    if c.excluded_slices:
        text += f"; {len(c.excluded_slices)} slice(s) concealed by both are left out of the figures"
    if not c.agrees:
        text += " — the decoders disagree on whether the frame is damaged"
    return text


def _exclude(ref: Frame, cand: Frame, info: FrameInfo, slices: list) -> Frame:
    """The candidate with the reference's samples in ``slices``, so that
    slices both decoders concealed (whose content neither defines) add no
    deviation."""
    planes = {k: v.copy() for k, v in cand.planes.items()}
    wanted = {tuple(x) for x in slices}
    for p, pic in enumerate(info.pictures):
        for sl in pic.slices:
            if (p, sl.index) not in wanted:
                continue
            for name, arr in planes.items():
                if name not in ref.planes or ref.planes[name].shape != arr.shape:
                    continue
                rows, cols = plane_shape(name, info.chroma_format, info.width, info.height)
                r = slice_rect(pic, sl, name, info.chroma_format, rows, cols)
                ys = slice(r.y, r.y + r.height * r.row_step, r.row_step)
                xs = slice(r.x, r.x + r.width)
                arr[ys, xs] = ref.planes[name][ys, xs]
    return replace(cand, planes=planes)


def _tag_file(stats: PlaneStats, path: str) -> PlaneStats:
    """Label worst slices with their file, so a multi-file total stays readable."""
    stats.worst = [replace(w, file=path) for w in stats.worst]
    return stats
