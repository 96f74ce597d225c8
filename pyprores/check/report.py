"""Turning comparison results into text, JSON and deviation-map PNGs.

The JSON layout is a contract for scripts and CI: it is described by
``pyprores/schema/compare.schema.json`` and docs/COMPARE.md, and
:data:`SCHEMA_ID` changes whenever a field changes meaning.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import TextIO

from .. import __version__
from .compare import FileResult, Summary
from .devmap import write_map
from .metrics import HIST_RANGE, PlaneStats, SliceDeviation

SCHEMA_ID = "pyprores-compare/1"
SCHEMA_PATH = Path(__file__).resolve().parent.parent / "schema" / "compare.schema.json"


# -- JSON ----------------------------------------------------------------------

def slice_json(d: SliceDeviation) -> dict:
    out = {k: getattr(d, k) for k in ("frame", "picture", "field", "slice", "mb_x", "mb_y",
                                       "mb_count", "x", "y", "width", "height", "row_step",
                                       "max_abs")}
    if d.file is not None:
        out["file"] = d.file
    return out


def plane_json(s: PlaneStats) -> dict:
    """One plane's figures; PSNR is null exactly when ``identical`` is true."""
    return {
        "bit_depth": s.bit_depth,
        "samples": s.samples,
        "max_abs": s.max_abs,
        "mismatches": s.mismatches,
        "mismatch_share": s.mismatch_share,
        "mean_error": s.mean_error,
        "mean_abs_error": s.mean_abs_error,
        "rmse": s.rmse,
        "psnr_db": None if math.isinf(s.psnr_db) else s.psnr_db,
        "identical": s.identical,
        "histogram": {"min": -HIST_RANGE, "max": HIST_RANGE, "counts": s.histogram.tolist()},
        "worst_slices": [slice_json(w) for w in s.worst],
    }


def file_json(r: FileResult, max_dev: int) -> dict:
    st = r.stream
    return {
        "file": r.path,
        "frames": r.frames,
        "device": r.device,
        "backend": r.backend,
        "pixel_format": r.pixel_format,
        "bit_depth": r.bit_depth,
        "chroma_format": r.chroma_format,
        "width": st.width,
        "height": st.height,
        "codec_tag": st.codec_tag,
        "profile": st.profile,
        "field_order": st.field_order,
        "bitexact": r.bitexact,
        "max_abs": r.max_abs,
        "passed": r.passed(max_dev),
        "planes": {n: plane_json(s) for n, s in r.planes.items()},
        "validation_messages": list(r.validation_messages),
        "notes": list(r.notes),
        "concealment_agrees": r.concealment_agrees,
        "concealed": [dataclasses.asdict(c) for c in r.concealed],
    }


def summary_json(summary: Summary) -> dict:
    """The whole document, as ``compare --json`` writes it."""
    return {
        "schema": SCHEMA_ID,
        "tool": {"name": "pyprores", "version": __version__},
        "ffmpeg": summary.ffmpeg,
        "device": summary.device,
        "backend": summary.backend,
        "max_dev": summary.max_dev,
        "frames": summary.frames,
        "bitexact": summary.bitexact,
        "passed": summary.passed,
        "files": [file_json(f, summary.max_dev) for f in summary.files],
        "total": {
            "files": len(summary.files),
            "frames": summary.frames,
            "bitexact": summary.bitexact,
            "max_abs": max((s.max_abs for s in summary.total.values()), default=0),
            "planes": {n: plane_json(s) for n, s in summary.total.items()},
        },
    }


def write_json(summary: Summary, path: str | os.PathLike) -> None:
    """Write the JSON report (``-`` for standard output)."""
    text = json.dumps(summary_json(summary), indent=2, allow_nan=False) + "\n"
    if os.fspath(path) == "-":
        import sys
        sys.stdout.write(text)
    else:
        Path(path).write_text(text)


# -- text ----------------------------------------------------------------------

COLUMNS = ("plane", "max dev", "mismatches", "share", "mean err", "mean |err|", "RMSE",
           "PSNR dB", "worst slice")


def _num(x: float) -> str:
    return "0" if x == 0 else f"{x:.4g}"


def where(d: SliceDeviation | None, with_file: bool = False) -> str:
    """Short description of a slice position, for the table's last column."""
    if d is None:
        return "-"
    field = f" {d.field} field," if d.field != "frame" else ""
    file = f"{Path(d.file).name} " if with_file and d.file else ""
    return f"{file}frame {d.frame},{field} slice {d.slice} at ({d.x},{d.y}) {d.width}x{d.height}"


def plane_row(name: str, s: PlaneStats, with_file: bool = False) -> list[str]:
    return [name, str(s.max_abs), str(s.mismatches),
            "0%" if not s.mismatches else f"{s.mismatch_share * 100:.4g}%",
            "0" if s.sum_error == 0 else f"{s.mean_error:+.4g}", _num(s.mean_abs_error),
            _num(s.rmse), "inf" if s.identical else f"{s.psnr_db:.2f}",
            where(s.worst[0] if s.worst else None, with_file)]


def table(planes: dict[str, PlaneStats], with_file: bool = False) -> str:
    rows = [list(COLUMNS)] + [plane_row(n, s, with_file) for n, s in planes.items()]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS))]
    lines = []
    for r in rows:
        cells = [r[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(r[1:-1], widths[1:-1])]
        lines.append("  " + "  ".join(cells + [r[-1]]))
    return "\n".join(lines)


def verdict(bitexact: bool, max_abs: int, max_dev: int) -> str:
    if bitexact:
        return "bit-exact"
    if max_abs <= max_dev:
        return f"within tolerance (max deviation {max_abs} <= --max-dev {max_dev})"
    return f"FAIL: max deviation {max_abs} > --max-dev {max_dev}"


def file_text(r: FileResult, max_dev: int) -> str:
    st = r.stream
    head = (f"{r.path}: {st.width}x{st.height} {r.pixel_format}, {st.codec_tag}"
            f"{f' ({st.profile})' if st.profile else ''}, {st.field_order}, {r.frames} frame(s); "
            f"candidate: {r.device or '?'}{f' ({r.backend})' if r.backend else ''}")
    lines = [head, table(r.planes)]
    lines += [f"  note: {n}" for n in r.notes]
    if r.validation_messages:
        lines.append(f"  Vulkan validation: {len(r.validation_messages)} message(s), first: "
                     f"{r.validation_messages[0]}")
    lines.append(f"  result: {verdict(r.bitexact, r.max_abs, max_dev)}")
    return "\n".join(lines)


def summary_text(summary: Summary) -> str:
    """Per-file tables, then a total when there is more than one file."""
    parts = [file_text(f, summary.max_dev) for f in summary.files]
    if len(summary.files) != 1:
        max_abs = max((s.max_abs for s in summary.total.values()), default=0)
        parts.append(f"TOTAL: {len(summary.files)} file(s), {summary.frames} frame(s)\n"
                     f"{table(summary.total, with_file=True)}\n"
                     f"  result: {verdict(summary.bitexact, max_abs, summary.max_dev)}")
    return "\n\n".join(parts) + "\n"


def print_summary(summary: Summary, out: TextIO) -> None:
    out.write(summary_text(summary))


# -- maps ----------------------------------------------------------------------

def map_paths(target: str | os.PathLike, results: list[FileResult]) -> list[Path]:
    """``OUT.png`` for one file; ``OUT-<stem>.png`` per file for several
    (``OUT-<stem>-<n>.png`` when two files share a stem)."""
    target = Path(target)
    if len(results) == 1:
        return [target]
    stem, suffix = target.with_suffix(""), target.suffix or ".png"
    paths, used = [], set()
    for i, r in enumerate(results):
        name = f"{stem}-{Path(r.path).stem}"
        if name in used:
            name = f"{name}-{i}"
        used.add(name)
        paths.append(Path(name + suffix))
    return paths


def write_maps(target: str | os.PathLike, results: list[FileResult]) -> list[Path]:
    """Write one deviation map per file; returns the paths written."""
    written = []
    for path, r in zip(map_paths(target, results), results):
        if any(s.grid is not None for s in r.planes.values()):
            write_map(r.planes, path)
            written.append(path)
    return written
