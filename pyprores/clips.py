"""Small synthetic ProRes clips, made with FFmpeg's ``prores_ks`` encoder.

``compare`` with no file checks these, and a corpus command can reuse
:class:`ClipSpec` for more.  The defaults are tiny (a few frames of about
256x144) so that a CPU Vulkan implementation decodes them in seconds, yet
they cover what differs between decoder paths: 4:2:2 vs 4:4:4, alpha,
12-bit output, interlaced field pictures (top field first), and slices of
several widths with a partial last macroblock row.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

#: prores_ks profile numbers by name
PROFILES = {"proxy": 0, "lt": 1, "standard": 2, "hq": 3, "4444": 4, "4444xq": 5}


@dataclass(frozen=True)
class ClipSpec:
    """What to encode; ``name`` becomes the file stem."""

    name: str
    width: int = 256
    height: int = 144
    frames: int = 4
    profile: str = "hq"
    pix_fmt: str = "yuv422p10le"
    interlaced: bool = False      # field pictures, top field first
    rate: int = 25
    seed: int = 1


DEFAULT_CLIPS = (
    ClipSpec("hq422", profile="hq", pix_fmt="yuv422p10le"),
    # 240 = 15 MBs: slices of 8, 4, 2 and 1 MBs; 136 rows: a partial MB row
    ClipSpec("4444alpha", width=240, height=136, profile="4444", pix_fmt="yuva444p10le"),
    # 144 rows = two 72-row fields: the last field MB row is partial
    ClipSpec("interlaced422", profile="hq", pix_fmt="yuv422p10le", interlaced=True),
)


def synthetic_planes(spec: ClipSpec, index: int) -> list[np.ndarray]:
    """10-bit test content for frame ``index``: gradients, moving edges and
    noise, so that every slice has real coefficients to decode."""
    rng = np.random.default_rng(spec.seed * 1000 + index)
    fmt = av.VideoFormat(spec.pix_fmt, spec.width, spec.height)
    planes = []
    for i, comp in enumerate(fmt.components):
        h, w = comp.height, comp.width
        y, x = np.mgrid[0:h, 0:w]
        base = (x * 700 // max(1, w - 1) + y * 300 // max(1, h - 1) + 32 * i) % 1024
        bars = np.where(((x + 7 * index) // 12 + (y // 20)) % 2 == 0, 120, -120)
        noise = rng.integers(-40, 41, size=(h, w))
        if i == 3:  # alpha: a soft-edged shape moving across the frame
            d = np.hypot(x - (w * (0.3 + 0.1 * index)), y - h / 2)
            planes.append(np.clip(1023 - (d - h / 4) * 40, 0, 1023).astype(np.uint16))
            continue
        planes.append(np.clip(base + bars + noise, 64, 940).astype(np.uint16))
    return planes


def generate(spec: ClipSpec, directory: str | os.PathLike) -> Path:
    """Encode ``spec`` into ``directory/<name>.mov`` and return its path."""
    path = Path(directory) / f"{spec.name}.mov"
    options = {"profile": str(PROFILES[spec.profile])}
    if spec.interlaced:
        options["flags"] = "+ildct"
    with av.open(str(path), "w") as out:
        stream = out.add_stream("prores_ks", rate=spec.rate, options=options)
        stream.width, stream.height, stream.pix_fmt = spec.width, spec.height, spec.pix_fmt
        graph = _field_order_graph(spec) if spec.interlaced else None
        for n in range(spec.frames):
            frame = av.VideoFrame(spec.width, spec.height, spec.pix_fmt)
            for plane, data in zip(frame.planes, synthetic_planes(spec, n)):
                _fill_plane(plane, data)
            frame.pts = n
            if graph is not None:   # prores_ks reads field order from the frame flags
                graph.push(frame)
                frame = graph.pull()
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def generate_defaults(directory: str | os.PathLike) -> list[Path]:
    """Encode :data:`DEFAULT_CLIPS` into ``directory`` (created if needed)."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    return [generate(spec, directory) for spec in DEFAULT_CLIPS]


def _fill_plane(plane: "av.video.plane.VideoPlane", data: np.ndarray) -> None:
    """Write ``data`` into a plane whose rows may be padded (line_size)."""
    view = np.frombuffer(plane, dtype="<u2").reshape(plane.height, plane.line_size // 2)
    view[:, : plane.width] = data


def _field_order_graph(spec: ClipSpec) -> "av.filter.Graph":
    """A setfield=tff filter: PyAV cannot set a frame's interlace flags itself."""
    graph = av.filter.Graph()
    src = graph.add_buffer(width=spec.width, height=spec.height, format=spec.pix_fmt,
                           time_base=Fraction(1, spec.rate))
    setfield = graph.add("setfield", "tff")
    sink = graph.add("buffersink")
    src.link_to(setfield)
    setfield.link_to(sink)
    graph.configure()
    return graph
