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


# -- clips made by the ffmpeg binary ----------------------------------------------
#
# ``Recipe`` describes a clip that the ``ffmpeg`` command line encodes from a
# lavfi source, with ``prores_ks`` or ``prores_aw``: the corpus (``pyprores
# corpus``), the hwaccel tests and tools/gpu/conformance-gpu all use it, so a
# recipe means the same clip everywhere.  ``Recipe.ffmpeg_args`` is the whole
# command line after the binary; only filters of the minimal build are used
# (testsrc, testsrc2, color, noise, geq, format, setfield).

#: ProRes profile numbers (``-profile:v``), the same for both encoders
ENCODERS = ("prores_ks", "prores_aw")
SCANS = ("progressive", "tff", "bff")
CONTENTS = ("camera", "edges", "flat", "noise")
#: quantiser settings; prores_aw has no quantiser control, so only "auto" there
QUANTS = {
    "auto": (),                          # the encoder's rate control at its default rate
    "q1": ("-qscale:v", "1"),            # finest quantiser: the largest coefficients
    "q64": ("-qscale:v", "64"),          # coarsest quantiser prores_ks accepts
    "bpm8192": ("-bits_per_mb", "8192"),  # rate control at the highest bit budget
}
#: prores_ks -quant_mat names
QUANT_MATS = ("proxy", "lt", "standard", "hq", "default")

# A per-pixel hash in [0, 1): camera-independent, full-entropy "noise" content
# that is the same on every machine (geq's random() depends on slice threading).
_HASH = "mod(abs(sin({x}*12.9898+{y}*78.233+N*37.719+{k}))*43758.5453\\,1)"


def aw_field_overread(scan: str, height: int) -> bool:
    """FFmpeg 7.1.5's prores_aw allocates its edge-fill buffers only when the frame
    height is not a multiple of 16; an interlaced field that is not a multiple of
    16 then reads past the frame (ASan: heap-buffer-overflow, proresenc_anatoliy.c
    calc_plane_dct; 3840x2160 TFF/BFF segfaults, 16x16 and 64x48 read garbage)."""
    return scan != "progressive" and height % 16 == 0 and (height // 2) % 16 != 0


def _hash(k: float, x: str = "X", y: str = "Y") -> str:
    return _HASH.format(x=x, y=y, k=k)


@dataclass(frozen=True)
class Recipe:
    """One ProRes clip encoded by the ffmpeg binary; see :meth:`ffmpeg_args`."""

    name: str
    encoder: str = "prores_ks"
    profile: str = "hq"
    alpha_bits: int = 0           # 0 (no alpha), 8 or 16 (prores_aw: 16 only)
    scan: str = "progressive"     # progressive, tff, bff
    mbs_per_slice: int = 8        # prores_ks only (prores_aw always uses 8)
    quant: str = "auto"           # a key of QUANTS
    quant_mat: str | None = None  # prores_ks -quant_mat, None for the profile's own
    width: int = 64
    height: int = 48
    frames: int = 2
    content: str = "camera"       # a member of CONTENTS
    rate: int = 25

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise ValueError(f"recipe {self.name}: " + "; ".join(problems))

    def problems(self) -> list[str]:
        """What makes this combination impossible (empty when it is valid)."""
        p = []
        if self.encoder not in ENCODERS:
            p.append(f"encoder must be one of {ENCODERS}")
        if self.profile not in PROFILES:
            p.append(f"profile must be one of {tuple(PROFILES)}")
        if self.scan not in SCANS:
            p.append(f"scan must be one of {SCANS}")
        if self.content not in CONTENTS:
            p.append(f"content must be one of {CONTENTS}")
        if self.quant not in QUANTS:
            p.append(f"quant must be one of {tuple(QUANTS)}")
        if self.alpha_bits not in (0, 8, 16):
            p.append("alpha_bits must be 0, 8 or 16")
        if self.alpha_bits and not self.is_444:
            p.append("alpha needs a 4444 profile")
        if self.mbs_per_slice not in (1, 2, 4, 8):
            p.append("mbs_per_slice must be 1, 2, 4 or 8")
        if self.encoder == "prores_aw":
            if self.alpha_bits == 8:
                p.append("prores_aw writes 16-bit alpha only")
            if self.mbs_per_slice != 8:
                p.append("prores_aw always uses 8 macroblocks per slice")
            if self.quant != "auto" or self.quant_mat:
                p.append("prores_aw has no quantiser options")
            if aw_field_overread(self.scan, self.height):
                p.append("prores_aw (FFmpeg 7.1.5) reads past the frame for interlaced pictures whose "
                         "height is a multiple of 16 but whose field height is not (heap-buffer-overflow "
                         "in calc_plane_dct; 3840x2160 crashes)")
        if self.quant_mat is not None and self.quant_mat not in QUANT_MATS:
            p.append(f"quant_mat must be one of {QUANT_MATS}")
        if self.width < 2 or self.height < 2 or self.width % 2:
            p.append("width must be even and the size at least 2x2")
        if self.frames < 1:
            p.append("frames must be at least 1")
        return p

    # -- derived facts ----------------------------------------------------------
    @property
    def is_444(self) -> bool:
        return self.profile in ("4444", "4444xq")

    @property
    def input_pix_fmt(self) -> str:
        if self.alpha_bits:
            return "yuva444p10le"
        return "yuv444p10le" if self.is_444 else "yuv422p10le"

    @property
    def decoded_pix_fmt(self) -> str:
        """What FFmpeg's ProRes decoder outputs: 4:4:4 decodes to 12 bits."""
        if not self.is_444:
            return "yuv422p10le"
        return "yuva444p12le" if self.alpha_bits else "yuv444p12le"

    @property
    def codec_tag(self) -> str:
        return {"proxy": "apco", "lt": "apcs", "standard": "apcn", "hq": "apch",
                "4444": "ap4h", "4444xq": "ap4x"}[self.profile]

    @property
    def size(self) -> str:
        return f"{self.width}x{self.height}"

    def params(self) -> dict:
        """The recipe's fields (for a manifest)."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    def describe(self) -> str:
        """A short human description: 'prores_ks 4444 a16 tff s4 q1 noise 50x34'."""
        parts = [self.encoder, self.profile]
        if self.alpha_bits:
            parts.append(f"alpha{self.alpha_bits}")
        if self.scan != "progressive":
            parts.append(self.scan.upper())
        if self.encoder == "prores_ks":
            parts.append(f"{self.mbs_per_slice}mb/slice")
        if self.quant != "auto":
            parts.append(self.quant)
        if self.quant_mat:
            parts.append(f"qmat {self.quant_mat}")
        parts += [self.content, self.size, f"{self.frames}f"]
        return " ".join(parts)

    # -- the command line ------------------------------------------------------
    def filtergraph(self) -> str:
        """The lavfi source graph: content, pixel format, alpha, field order."""
        w, h, r = self.width, self.height, self.rate
        fmt = self.input_pix_fmt
        alpha = self.alpha_bits > 0
        if self.content == "camera":       # moving test pattern + temporal grain
            chain = [f"testsrc2=s={w}x{h}:r={r}", "noise=alls=14:allf=t+u", f"format={fmt}"]
            a = "clip(1023-(hypot(X-W*(0.3+0.1*N)\\,Y-H/2)-H/4)*40\\,0\\,1023)"
        elif self.content == "edges":      # sharp edges and text
            chain = [f"testsrc=s={w}x{h}:r={r}", f"format={fmt}"]
            a = "if(lt(mod(X+3*N\\,16)\\,8)\\,1023\\,if(lt(mod(Y\\,12)\\,6)\\,0\\,512))"
        elif self.content == "flat":       # one colour: DC only
            chain = [f"color=c=0x4a7fb6:s={w}x{h}:r={r}", f"format={fmt}"]
            a = "700"
        else:                              # full-range noise in every plane
            chain = [f"color=c=black:s={w}x{h}:r={r}", f"format={fmt}"]
            planes = [f"lum='{_hash(0.0)}*1023'", f"cb='{_hash(1.7)}*1023'", f"cr='{_hash(3.1)}*1023'"]
            if alpha:
                planes.append(f"a='{_hash(4.9)}*1023'")
            chain.append("geq=" + ":".join(planes))
            alpha = False                  # done
        if alpha:
            chain.append(f"geq=lum='lum(X,Y)':cb='cb(X,Y)':cr='cr(X,Y)':a='{a}'")
        if self.scan != "progressive":
            chain.append(f"setfield={self.scan}")
        return ",".join(chain)

    def encoder_args(self) -> list[str]:
        args = ["-c:v", self.encoder, "-profile:v", str(PROFILES[self.profile])]
        if self.scan != "progressive":
            # prores_ks/aw take the field order from the frames (setfield);
            # -field_order makes the container agree.
            args += ["-flags", "+ildct", "-field_order", "tt" if self.scan == "tff" else "bb"]
        if self.encoder == "prores_ks":
            args += ["-mbs_per_slice", str(self.mbs_per_slice)]
            if self.alpha_bits:
                args += ["-alpha_bits", str(self.alpha_bits)]
            if self.quant_mat:
                args += ["-quant_mat", self.quant_mat]
            args += list(QUANTS[self.quant])
        return args

    def ffmpeg_args(self, output: str | os.PathLike) -> list[str]:
        """Arguments after the ffmpeg binary that write this clip to ``output``."""
        return ["-hide_banner", "-nostdin", "-loglevel", "error", "-y",
                "-f", "lavfi", "-i", self.filtergraph(), "-frames:v", str(self.frames),
                "-pix_fmt", self.input_pix_fmt, *self.encoder_args(), os.fspath(output)]

    def encode(self, ffmpeg: str | os.PathLike, directory: str | os.PathLike,
               timeout: float = 600) -> Path:
        """Run ffmpeg to write ``directory/<name>.mov``; CalledProcessError names the command."""
        import subprocess
        path = Path(directory) / f"{self.name}.mov"
        argv = [os.fspath(ffmpeg), *self.ffmpeg_args(path)]
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if res.returncode != 0:
            raise subprocess.CalledProcessError(res.returncode, argv, res.stdout, res.stderr)
        return path
