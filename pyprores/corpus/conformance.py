"""Conformance run over a corpus manifest (``pyprores conformance``).

Every clip of the manifest goes through the compare pipeline
(:func:`pyprores.check.compare.compare_file`): the candidate (by default the
Vulkan hwaccel through ``pyprores.decode.native``) against FFmpeg's software
decoder, plane by plane. On top of that each decoded frame is hashed the way
``-f framemd5`` hashes the decoder's native format (the planes one after the
other, 16-bit little-endian samples, no padding) and checked against the
software MD5s recorded in the manifest, so that a reference that drifted
(another FFmpeg, a changed clip) cannot make a wrong decode look right.

A clip passes when every plane is identical, the frame count matches the
manifest and both decoders' MD5s equal the manifest's.
"""

from __future__ import annotations

import datetime
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..check.compare import compare_file
from . import load_manifest
from ..errors import DeviceError, NativeLibraryError, PyproresError
from ..model import PLANE_NAMES, Frame
from ..decode.pipeline import DEFAULT_IN_FLIGHT

BEGIN = "<!-- pyprores conformance: begin -->"
END = "<!-- pyprores conformance: end -->"


def frame_md5(frame: Frame) -> str:
    """MD5 of a frame as FFmpeg's framemd5 muxer hashes its rawvideo packet."""
    h = hashlib.md5()
    for name in PLANE_NAMES:
        plane = frame.planes.get(name)
        if plane is not None:
            h.update(plane.astype("<u2", copy=False).tobytes(order="C"))
    return h.hexdigest()


@dataclass
class ClipResult:
    name: str
    description: str
    pix_fmt: str
    expected_frames: int
    frames: int = 0
    max_abs: dict[str, int] = field(default_factory=dict)   # per plane
    identical: bool = False
    reference_md5_ok: bool = False    # software decode == manifest
    candidate_md5_ok: bool = False    # candidate decode == manifest
    first_md5_mismatch: int | None = None
    error: str | None = None
    validation_messages: list[str] = field(default_factory=list)

    @property
    def bitexact(self) -> bool:
        return (self.error is None and self.identical and self.frames == self.expected_frames
                and self.candidate_md5_ok)

    @property
    def passed(self) -> bool:
        return self.bitexact and self.reference_md5_ok


@dataclass
class ConformanceRun:
    manifest: str
    mode: str
    device: str
    backend: str
    ffmpeg: str
    corpus_command: str | None
    started: datetime.datetime
    clips: list[ClipResult]
    seconds: float = 0.0
    build: dict | None = None      # the candidate's FFmpeg build (pyprores.builds.describe())
    note: str = ""                 # the session's note (e.g. validation left off for its device)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.clips)

    @property
    def frames(self) -> int:
        return sum(c.frames for c in self.clips)


def check_clip(entry: dict, base: Path, session,
               progress: Callable[[int, "int | None"], None] | None = None,
               in_flight: int = DEFAULT_IN_FLIGHT) -> ClipResult:
    """Check one manifest clip with ``session`` (``in_flight`` frames decoding
    at once, see :func:`pyprores.check.compare.compare_file`). A file the pipeline
    refuses becomes the clip's ``error``; device and extension failures propagate."""
    res = ClipResult(name=entry["name"], description=entry.get("description", ""),
                     pix_fmt=entry["pix_fmt"], expected_frames=entry["frames"])
    expected = entry["framemd5"]
    ref_ok, cand_ok = [], []

    def on_frame(n: int, ref: Frame, cand: Frame) -> None:
        want = expected[n] if n < len(expected) else None
        r, c = frame_md5(ref) == want, frame_md5(cand) == want
        ref_ok.append(r)
        cand_ok.append(c)
        if not (r and c) and res.first_md5_mismatch is None:
            res.first_md5_mismatch = n

    try:
        fr = compare_file(base / entry["file"], session, progress=progress, on_frame=on_frame,
                          in_flight=in_flight)
    except (DeviceError, NativeLibraryError):
        raise
    except PyproresError as e:
        res.error = str(e)
    else:
        res.frames = fr.frames
        res.max_abs = {k: v.max_abs for k, v in fr.planes.items()}
        res.identical = fr.bitexact
        res.validation_messages = fr.validation_messages
        res.reference_md5_ok = bool(ref_ok) and all(ref_ok) and len(ref_ok) == len(expected)
        res.candidate_md5_ok = bool(cand_ok) and all(cand_ok) and len(cand_ok) == len(expected)
    return res


# check_all(entries, base, progress) -> (clip results in manifest order, device name, backend, note)
CheckAll = Callable[[list, Path, "Callable[[int, int], None] | None"], "tuple[list[ClipResult], str, str, str]"]


def run(manifest_path: str | os.PathLike, session=None, progress: Callable[[int, int], None] | None = None,
        check_all: CheckAll | None = None, in_flight: int = DEFAULT_IN_FLIGHT) -> ConformanceRun:
    """Check every clip of the manifest with ``session`` (a native.Session or
    anything with its interface; ``in_flight`` frames decoding at once), or
    with ``check_all`` (the clips spread over workers:
    pyprores.cluster.conformance_clips, which has its own ``in_flight``)."""
    import time
    doc = load_manifest(manifest_path)
    base = Path(doc["_dir"])
    total = sum(c["frames"] for c in doc["clips"])
    started = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.monotonic()
    if check_all is not None:
        results, device, backend, note = check_all(doc["clips"], base, progress)
    else:
        results = []
        done_before = 0
        for entry in doc["clips"]:
            def step(done: int, _total: int | None, _before=done_before) -> None:
                if progress:
                    progress(_before + done, total)

            results.append(check_clip(entry, base, session, step, in_flight))
            done_before += entry["frames"]
            if progress:
                progress(done_before, total)
        device, backend = getattr(session, "device_name", "?"), getattr(session, "backend", "?")
        note = getattr(session, "note", "") or ""
    return ConformanceRun(
        manifest=os.fspath(manifest_path), mode=doc.get("mode", "?"), device=device, backend=backend,
        ffmpeg=(doc.get("ffmpeg") or {}).get("version", "?"), corpus_command=doc.get("command"),
        started=started, clips=results, seconds=time.monotonic() - t0, note=note)


# -- Markdown ----------------------------------------------------------------------

def _dev(r: ClipResult, plane: str) -> str:
    if r.error is not None:
        return "?"
    return str(r.max_abs[plane]) if plane in r.max_abs else "–"


def _md5_cell(r: ClipResult, backend: str) -> str:
    if r.error is not None:
        return "–"
    if r.reference_md5_ok and r.candidate_md5_ok:
        return "match"
    who = [n for n, ok in (("software", r.reference_md5_ok), (backend, r.candidate_md5_ok)) if not ok]
    at = f" (frame {r.first_md5_mismatch})" if r.first_md5_mismatch is not None else ""
    return "**differs: " + ", ".join(who) + at + "**"


def markdown(run: ConformanceRun, command: str) -> str:
    """The conformance section: facts, then one row per clip."""
    ok = sum(1 for c in run.clips if c.passed)
    lines = [
        BEGIN,
        f"## {run.mode.capitalize()} corpus — {run.device}",
        "",
        f"- Date: {run.started.strftime('%Y-%m-%d %H:%M UTC')} ({run.seconds:.0f} s)",
    ]
    if run.corpus_command:
        lines.append(f"- Corpus: `{run.corpus_command}`")
    if run.build:
        b = run.build
        series = b.get("series")
        what = ("patch series unknown" if series is None else
                "pristine, no patches" if not series else f"{len(series)} patches")
        lines.append(f"- FFmpeg build: {b.get('build')} — FFmpeg {b.get('version')}, "
                     f"libavcodec {b.get('libavcodec')}, {what}")
    if run.note:
        lines.append(f"- Note: Vulkan device {run.note}")
    lines += [
        f"- Command: `{command}`",
        f"- Candidate: {run.backend} backend of `pyprores.decode.native` on **{run.device}**; reference: FFmpeg's "
        "software decoder (PyAV), and the manifest's framemd5 of the software decoder of the build that "
        f"made the corpus ({run.ffmpeg}).",
        f"- Result: **{ok}/{len(run.clips)} clips bit-exact**, {run.frames} frames"
        + ("" if run.passed else " — FAILURES below"),
        "",
        "| clip | variant | frames | max abs dev Y | Cb | Cr | A | bit-exact | framemd5 vs manifest | device |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in run.clips:
        frames = f"{r.frames}" if r.frames == r.expected_frames else f"**{r.frames}/{r.expected_frames}**"
        exact = "yes" if r.bitexact else "**NO**"
        lines.append(f"| {r.name} | {r.description} | {frames} | {_dev(r, 'Y')} | {_dev(r, 'Cb')} | "
                     f"{_dev(r, 'Cr')} | {_dev(r, 'A')} | {exact} | {_md5_cell(r, run.backend)} | {run.device} |")
    errors = [r for r in run.clips if r.error]
    if errors:
        lines += ["", "Errors:", ""] + [f"- `{r.name}`: {r.error}" for r in errors]
    messages = [(r.name, m) for r in run.clips for m in r.validation_messages]
    if messages:
        lines += ["", "Validation-layer messages:", ""] + [f"- `{n}`: {m}" for n, m in messages[:50]]
    lines.append(END)
    return "\n".join(lines) + "\n"


def write_markdown(path: str | os.PathLike, section: str, title: str = "# Conformance") -> None:
    """Write ``section`` into ``path``: between the markers when the file has
    them, else at its end (the rest of the file is always kept); a new file
    gets ``title`` first."""
    path = Path(path)
    if path.exists():
        text = path.read_text()
        if BEGIN in text and END in text:
            head, rest = text.split(BEGIN, 1)
            _, tail = rest.split(END, 1)
            path.write_text(head + section.rstrip("\n") + tail)
        else:
            path.write_text(text.rstrip("\n") + "\n\n" + section)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{title}\n\n{section}")
