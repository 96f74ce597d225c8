"""``pyprores fuzz``: a mutation fuzzer for the ProRes decoders (issue 8).

Mutants of real ProRes packets (the conformance corpus, given files, or a
small built-in seed set) are decoded by FFmpeg's software decoder and by the
``prores_vulkan`` hwaccel, each in a persistent child process
(:mod:`pyprores.fuzz.worker`) with a per-mutant time limit. A worker that
dies is a *crash* (its signal is recorded), one that does not answer in time
is a *hang* (it is killed); either way it is restarted and the run goes on.

Mutants are reproducible: mutant ``index`` of run ``--seed S`` is generated
from ``numpy.random.default_rng([S, index])`` over the same seed packets, so
``pyprores fuzz --seed S --reproduce index --save out.bin`` writes it again.

Mutators (see :data:`MUTATORS`): bit flips, byte overwrites, chunk deletion
and duplication, truncation at every structural boundary, frame and picture
header field edits, slice index edits (zero, overlapping, past the packet,
tiny), and single-slice damage (bit flips, garbage, codes that never
terminate: all 0xff or all 0x00, slice header edits, resized slices). A
single-slice mutant is decoded through the slice-submission API and must
leave every other slice of the frame exactly as the unmodified packet
decodes (*slice isolation*).

Both decoders must also give each mutant the same outcome (*damage
agreement*): the frame out intact (``ok``), out and flagged corrupt
(``corrupt``), or refused (``error``), with the software decoder on one
thread as the reference. A frame one decoder refuses and the other
outputs, flagged or not, is a disagreement: a different number of frames
from the same file (issue 35). Where both flag a frame corrupt, the slices
each concealed are compared too (reported, not a failure: see
docs/ROBUSTNESS.md).

Counted per backend: mutants, clean decodes, frames flagged corrupt, clean
errors, crashes, hangs, validation-layer messages (other than the known
noise of Debian 12's layer), sanitizer reports (in the workers' stderr when
FFmpeg is an ASan/UBSan build), isolation checks and failures, and the
workers' RSS. Crashing and hanging mutants are minimised (byte-level delta
debugging against the original packet) and can be saved as regression
inputs (``--save-regressions DIR``).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import multiprocessing
import os
import platform
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from . import worker as fuzz_worker
from ..bitstream import parse_frame
from ..errors import DecodeError, NotProResError, PyproresError
from ..geometry import slice_rect
from ..model import FrameInfo

BACKENDS = ("software", "vulkan")

#: Validation-layer messages that are not ours (the same list as
#: tests/conftest.py KNOWN_LAYER_NOISE, which explains each one; a test keeps
#: the two equal). Handed to the workers as PYPRORES_VALIDATION_IGNORE.
VALIDATION_NOISE = (
    "VUID-VkDeviceCreateInfo-pNext-pNext",
    "VUID-VkPhysicalDeviceProperties2-pNext-pNext",
    "is not supported by this layer",
    "UNASSIGNED-CoreValidation-DrawState-InvalidImageLayout",
    "UNASSIGNED-VkSemaphore-state-timeout",
    "DebugTypeArray: Component Count must be OpConstant",
    "should be sub-allocated from larger memory blocks",
    "using VK_PIPELINE_STAGE_2_ALL_COMMANDS_BIT",
)

#: what marks a sanitizer report in a worker's stderr
SANITIZER_MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
                   "UndefinedBehaviorSanitizer", "ERROR: ThreadSanitizer")

#: clean outcomes of one decode; anything else is a finding
CLEAN = ("ok", "corrupt", "error")


def damage_agrees(reference: str, candidate: str) -> bool:
    """Do two clean outcomes (:data:`CLEAN`) of one packet agree? Only when
    they are the same: a frame out unflagged, out flagged corrupt, or
    refused. A refusal against a frame out, flagged or not, is a
    disagreement (a different number of frames from the same file)."""
    return reference == candidate


# ================================================================== seeds

@dataclass(frozen=True)
class Seed:
    """One valid ProRes packet to mutate."""

    name: str
    tag: str
    data: bytes
    info: FrameInfo


#: (name, size, filters after testsrc2, prores_ks arguments): tiny clips that
#: cover 4:2:2 / 4:4:4, 8- and 16-bit alpha, both field orders, slices of 1, 2,
#: 4 and 8 macroblocks, partial macroblock rows and a custom quantisation matrix
DEFAULT_SEED_CLIPS = (
    ("hq422-72x40", "72x40", "format=yuv422p10le", ("-profile:v", "3")),
    ("proxy422-s1-40x24", "40x24", "format=yuv422p10le", ("-profile:v", "0", "-mbs_per_slice", "1")),
    ("4444a16-48x40", "48x40",
     "format=yuva444p10le,geq=lum='lum(X,Y)':cb='cb(X,Y)':cr='cr(X,Y)':a='mod(X*37+Y*11,1024)'",
     ("-profile:v", "4", "-pix_fmt", "yuva444p10le", "-alpha_bits", "16")),
    ("4444a8-s2-40x33", "40x33",
     "format=yuva444p10le,geq=lum='lum(X,Y)':cb='cb(X,Y)':cr='cr(X,Y)':a='mod(X*29,1024)'",
     ("-profile:v", "4", "-pix_fmt", "yuva444p10le", "-alpha_bits", "8", "-mbs_per_slice", "2")),
    ("tff422-64x50", "64x50", "setfield=tff,format=yuv422p10le",
     ("-flags", "+ildct", "-profile:v", "2")),
    ("bff444xq-48x40", "48x40", "setfield=bff,format=yuv444p10le",
     ("-flags", "+ildct", "-profile:v", "5")),
    ("lt422-qmat-s4-88x32", "88x32", "format=yuv422p10le",
     ("-profile:v", "1", "-quant_mat", "proxy", "-mbs_per_slice", "4")),
)


def ffmpeg_dir() -> Path:
    """The FFmpeg build: the selected one ($PYPRORES_BUILD, see pyprores.builds),
    else $PYPRORES_FFMPEG_DIR, else build/ffmpeg of the checkout."""
    from .. import builds
    return builds.ffmpeg_dir()


def make_default_seeds(outdir: str | os.PathLike, ffmpeg: str | os.PathLike | None = None) -> list[Path]:
    """Encode :data:`DEFAULT_SEED_CLIPS` (one frame each) into ``outdir``."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    binary = Path(ffmpeg) if ffmpeg else ffmpeg_dir() / "bin" / "ffmpeg"
    if not binary.is_file():
        raise PyproresError(f"{binary} not found: run ./scripts/setup or set PYPRORES_FFMPEG_DIR")
    paths = []
    for name, size, vf, args in DEFAULT_SEED_CLIPS:
        path = outdir / f"{name}.mov"
        cmd = [str(binary), "-hide_banner", "-v", "error", "-y", "-f", "lavfi",
               "-i", f"testsrc2=s={size}:r=25:d=0.04,{vf}", "-c:v", "prores_ks", *args, str(path)]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            raise PyproresError(f"encoding the seed clip {name} failed: {res.stderr.strip()[-400:]}")
        paths.append(path)
    return paths


def _seed(name: str, tag: str, data: bytes) -> Seed | None:
    try:
        info = parse_frame(data, tag)
    except (DecodeError, NotProResError):
        return None
    if not info.pictures or any(not p.slices for p in info.pictures):
        return None
    return Seed(name, tag, data, info)


def load_seeds(inputs: Sequence[str | os.PathLike], frames: int = 1, tag: str = "apch") -> list[Seed]:
    """Seed packets from ``inputs``: video files (the first ``frames`` packets),
    corpus directories or manifests (every clip), or raw ``.bin`` packets
    (codec tag ``tag``, or the one named in a regressions index next to them)."""
    from ..decode import demux
    seeds: list[Seed] = []
    for item in inputs:
        path = Path(item)
        if path.is_dir() or path.name == "manifest.json":
            if path.is_dir() and not (path / "manifest.json").is_file():
                files = sorted(p for p in path.iterdir() if p.suffix in (".mov", ".mkv", ".bin"))
                seeds += load_seeds(files, frames, tag)
                continue
            from ..corpus import load_manifest
            doc = load_manifest(path)
            files = [Path(doc["_dir"]) / c["file"] for c in doc["clips"]]
            seeds += load_seeds(files, frames, tag)
            continue
        if path.suffix == ".bin":
            s = _seed(path.name, _tag_for_bin(path, tag), path.read_bytes())
            if s is None:
                raise PyproresError(f"{path}: not a ProRes packet that FFmpeg decodes; seeds must be valid")
            seeds.append(s)
            continue
        with demux.open(path) as src:
            got = 0
            for n, data in enumerate(src.packets()):
                if got >= frames:
                    break
                s = _seed(f"{path.name}#{n}", src.info.codec_tag, bytes(data))
                if s is not None:
                    seeds.append(s)
                    got += 1
    return seeds


def _tag_for_bin(path: Path, default: str) -> str:
    index = path.parent / "index.json"
    if index.is_file():
        for entry in json.loads(index.read_text()).get("inputs", []):
            if entry.get("file") == path.name:
                return entry.get("codec_tag", default)
    return default


def seeds_digest(seeds: Sequence[Seed]) -> str:
    """SHA-256 over the seed packets in order: a run is reproducible only
    over the same seeds, and this says whether they are."""
    h = hashlib.sha256()
    for s in seeds:
        h.update(s.tag.encode() + len(s.data).to_bytes(8, "big") + s.data)
    return h.hexdigest()[:16]


# ================================================================== packet surgery

def rebuild_packet(packet: bytes, info: FrameInfo, picture: int, index: int, data: bytes) -> bytes:
    """``packet`` with slice ``index`` of ``picture`` replaced by ``data``:
    the slice index entry, the picture size and the frame size rewritten,
    exactly as ``ppr_frame_end`` builds the packet it decodes."""
    head = info.pictures[0].offset
    out = bytearray(packet[:head])
    for p, pic in enumerate(info.pictures):
        hdr = packet[pic.offset] >> 3
        start = len(out)
        out += packet[pic.offset:pic.offset + hdr]
        chunks = []
        for sl in pic.slices:
            chunk = data if (p, sl.index) == (picture, index) else packet[sl.offset:sl.offset + sl.size]
            chunks.append(chunk)
            out += struct.pack(">H", len(chunk))
        for chunk in chunks:
            out += chunk
        struct.pack_into(">I", out, start + 1, len(out) - start)
    struct.pack_into(">I", out, 0, len(out))
    return bytes(out)


def boundaries(seed: Seed) -> list[int]:
    """Byte offsets where a structure of the packet starts or ends: the frame
    header, each picture header, slice index table and slice."""
    pos = {0, 4, 8, 10, 12, 16, 20, 28, len(seed.data)}
    hdr = struct.unpack_from(">H", seed.data, 8)[0]
    pos.add(8 + hdr)
    for pic in seed.info.pictures:
        ph = seed.data[pic.offset] >> 3
        pos |= {pic.offset, pic.offset + 1, pic.offset + 5, pic.offset + 7, pic.offset + ph,
                pic.offset + ph + 2 * len(pic.slices), pic.offset + pic.size}
        for sl in pic.slices:
            pos |= {sl.offset, sl.offset + 1, sl.offset + (seed.data[sl.offset] >> 3),
                    sl.offset + sl.size // 2, sl.offset + sl.size}
    return sorted(p for p in pos if 0 <= p <= len(seed.data))


# ================================================================== mutators

@dataclass(frozen=True)
class Mutant:
    """One mutated packet and how it was made."""

    seed_index: int
    seed_name: str
    tag: str
    mutator: str
    detail: str
    data: bytes
    slice: tuple[int, int] | None = None      # (picture, index): only this slice changed
    slice_data: bytes | None = None           # its new bytes (decoded through the slice API)


Rng = np.random.Generator
MutatorFn = Callable[[Rng, Seed], tuple]   # -> (data, detail[, (picture, index), slice bytes])

INTERESTING_BYTES = (0x00, 0xFF, 0x7F, 0x80, 0x01, 0xFE, 0x10, 0x40)


def _pick(rng: Rng, values: Sequence) -> Any:
    return values[int(rng.integers(len(values)))]


def _put(data: bytes, offset: int, fmt: str, value: int) -> bytes:
    b = bytearray(data)
    if offset + struct.calcsize(fmt) <= len(b):
        struct.pack_into(fmt, b, offset, value)
    return bytes(b)


def _set_bits(data: bytes, offset: int, mask: int, shift: int, value: int) -> bytes:
    b = bytearray(data)
    b[offset] = (b[offset] & ~mask & 0xFF) | ((value << shift) & mask)
    return bytes(b)


def m_bit_flip(rng: Rng, seed: Seed) -> tuple:
    b = bytearray(seed.data)
    bits = sorted(int(x) for x in rng.integers(0, len(b) * 8, int(rng.integers(1, 9))))
    for bit in bits:
        b[bit >> 3] ^= 0x80 >> (bit & 7)
    return bytes(b), f"bits {bits}"


def m_byte_overwrite(rng: Rng, seed: Seed) -> tuple:
    b = bytearray(seed.data)
    done = []
    for _ in range(int(rng.integers(1, 17))):
        pos = int(rng.integers(len(b)))
        val = _pick(rng, INTERESTING_BYTES) if rng.random() < 0.5 else int(rng.integers(256))
        b[pos] = val
        done.append((pos, val))
    return bytes(b), f"bytes {done}"


def m_chunk(rng: Rng, seed: Seed) -> tuple:
    d = seed.data
    a = int(rng.integers(8, len(d)))
    n = int(rng.integers(1, min(64, len(d) - a) + 1))
    if rng.random() < 0.5:
        return d[:a] + d[a + n:], f"delete {n} bytes at {a}"
    return d[:a + n] + d[a:], f"duplicate {n} bytes at {a}"


def m_truncate(rng: Rng, seed: Seed) -> tuple:
    b = _pick(rng, boundaries(seed))
    cut = min(len(seed.data) - 1, max(0, b + int(rng.integers(-1, 2))))
    return seed.data[:cut], f"cut to {cut} of {len(seed.data)} bytes (boundary {b})"


def _frame_fields(seed: Seed) -> dict[str, tuple]:
    """name -> (offset, struct format or (mask, shift), candidate values)."""
    d = seed.data
    hdr = struct.unpack_from(">H", d, 8)[0]
    w, h = seed.info.width, seed.info.height
    sizes = (0, 1, 2, 15, 16, 17, 8192, 16000, 65535)
    return {
        "frame_size": (0, ">I", (0, 1, len(d) - 1, len(d) + 1, len(d) * 2, 0xFFFFFFFF)),
        "header_size": (8, ">H", (0, 1, 19, 20, hdr - 1, hdr + 1, hdr + 64, 0xFFFF)),
        "version": (10, ">H", (0, 1, 2, 0xFFFF)),
        "width": (16, ">H", sizes + (w - 1, w + 1, w + 16, w - 16, w * 2)),
        "height": (18, ">H", sizes + (h - 1, h + 1, h + 16, h - 16, h * 2)),
        "chroma_format": (20, (0xC0, 6), (0, 1, 2, 3)),
        "interlace_mode": (20, (0x0C, 2), (0, 1, 2, 3)),
        "alpha_info": (25, (0x0F, 0), tuple(range(16))),
        "qmat_flags": (27, (0x03, 0), (0, 1, 2, 3)),
        "frame_flags_other": (21, ">B", (0, 0xFF, 0x80)),
    }


def _picture_fields(seed: Seed, p: int) -> dict[str, tuple]:
    pic = seed.info.pictures[p]
    o = pic.offset
    n = len(pic.slices)
    return {
        "picture_header_size": (o, (0xF8, 3), tuple(range(32))),
        "picture_size": (o + 1, ">I", (0, 1, 8, pic.size - 1, pic.size + 1, pic.size * 2, 0xFFFFFFFF)),
        "slice_count": (o + 5, ">H", (0, 1, n - 1, n + 1, 0xFFFF)),
        "log2_desired_slice_size_in_mb": (o + 7, (0xF0, 4), tuple(range(16))),
        "log2_slice_height": (o + 7, (0x0F, 0), (0, 1, 15)),
    }


def _edit_field(rng: Rng, seed: Seed, fields: dict[str, tuple], prefix: str = "") -> tuple:
    name = _pick(rng, sorted(fields))
    offset, how, values = fields[name]
    value = int(_pick(rng, values)) if rng.random() < 0.85 else int(rng.integers(0, 1 << 16))
    if isinstance(how, tuple):
        mask, shift = how
        value &= mask >> shift
        data = _set_bits(seed.data, offset, mask, shift, value)
    else:
        value &= (1 << (8 * struct.calcsize(how))) - 1
        data = _put(seed.data, offset, how, value)
    return data, f"{prefix}{name} = {value}"


def m_frame_field(rng: Rng, seed: Seed) -> tuple:
    return _edit_field(rng, seed, _frame_fields(seed))


def m_picture_field(rng: Rng, seed: Seed) -> tuple:
    p = int(rng.integers(len(seed.info.pictures)))
    return _edit_field(rng, seed, _picture_fields(seed, p), f"picture {p} ")


def m_index_entry(rng: Rng, seed: Seed) -> tuple:
    p = int(rng.integers(len(seed.info.pictures)))
    pic = seed.info.pictures[p]
    table = pic.offset + (seed.data[pic.offset] >> 3)
    n = len(pic.slices)
    i = int(rng.integers(n))
    size = pic.slices[i].size
    nxt = pic.slices[i + 1].size if i + 1 < n else 8
    left = len(seed.data) - pic.slices[i].offset
    kind = _pick(rng, ("zero", "overlap", "past-packet", "tiny", "shrink", "swap", "all-zero", "max"))
    d = seed.data
    if kind == "swap" and n > 1:
        j = int(rng.integers(n))
        d = _put(_put(d, table + 2 * i, ">H", pic.slices[j].size), table + 2 * j, ">H", size)
        return d, f"picture {p} index: swap entries {i} and {j}"
    if kind == "all-zero":
        return d[:table] + bytes(2 * n) + d[table + 2 * n:], f"picture {p} index: all entries 0"
    value = {"zero": 0, "overlap": size + int(rng.integers(1, nxt + 1)),
             "past-packet": left + int(rng.integers(1, 64)), "tiny": int(rng.integers(1, 6)),
             "shrink": max(0, size - int(rng.integers(1, size + 1))), "max": 0xFFFF,
             "swap": size}[kind]
    return _put(d, table + 2 * i, ">H", min(value, 0xFFFF)), f"picture {p} index[{i}] {kind}: {size} -> {min(value, 0xFFFF)}"


# -- single-slice mutators: they return the new bytes of one slice ----------------

def _slice(rng: Rng, seed: Seed) -> tuple[int, int, bytes]:
    p = int(rng.integers(len(seed.info.pictures)))
    sl = seed.info.pictures[p].slices[int(rng.integers(len(seed.info.pictures[p].slices)))]
    return p, sl.index, seed.data[sl.offset:sl.offset + sl.size]


def s_bit_flip(rng: Rng, s: bytes) -> tuple[bytes, str]:
    b = bytearray(s)
    bits = sorted(int(x) for x in rng.integers(0, len(b) * 8, int(rng.integers(1, 5))))
    for bit in bits:
        b[bit >> 3] ^= 0x80 >> (bit & 7)
    return bytes(b), f"bits {bits}"


def s_garbage(rng: Rng, s: bytes) -> tuple[bytes, str]:
    keep = s[0] >> 3 if rng.random() < 0.5 else 0
    return s[:keep] + rng.integers(0, 256, len(s) - keep, dtype=np.uint8).tobytes(), \
        f"random bytes after {keep}"


def _filled(rng: Rng, s: bytes, byte: int) -> tuple[bytes, str]:
    """Codes that never terminate: the coefficient data (or the whole slice)
    made of one byte value, at the original size or longer."""
    hdr = s[0] >> 3
    keep = hdr if rng.random() < 0.7 else 0
    size = len(s) if rng.random() < 0.6 else min(0xFFFF, len(s) * int(rng.integers(2, 17)))
    out = bytearray(s[:keep] + bytes([byte]) * (size - keep))
    if keep >= 6 and size != len(s) and rng.random() < 0.5:
        # keep the plane sizes consistent with the new size: all of it luma
        rest = size - hdr
        struct.pack_into(">HH", out, 2, min(rest, 0xFFFF), 0)
    return bytes(out), f"0x{byte:02x} after {keep} bytes, {size} bytes"


def s_ones(rng: Rng, s: bytes) -> tuple[bytes, str]:
    return _filled(rng, s, 0xFF)


def s_zeros(rng: Rng, s: bytes) -> tuple[bytes, str]:
    return _filled(rng, s, 0x00)


def s_header(rng: Rng, s: bytes) -> tuple[bytes, str]:
    b = bytearray(s)
    name = _pick(rng, ("header_size", "qscale", "luma_size", "u_size", "v_size"))
    if name == "header_size":
        b[0] = (int(rng.integers(32)) << 3) | (b[0] & 7)
        return bytes(b), f"slice header size {b[0] >> 3}"
    if name == "qscale":
        b[1] = _pick(rng, (0, 1, 2, 127, 128, 129, 224, 225, 255))
        return bytes(b), f"qscale {b[1]}"
    off = {"luma_size": 2, "u_size": 4, "v_size": 6}[name]
    value = _pick(rng, (0, 1, len(s), len(s) + 1, 0x7FFF, 0xFFFF, int(rng.integers(0, 1 << 16))))
    if off + 2 <= len(b):
        struct.pack_into(">H", b, off, value)
    return bytes(b), f"{name} {value}"


def s_resize(rng: Rng, s: bytes) -> tuple[bytes, str]:
    if rng.random() < 0.5 and len(s) > 6:
        n = int(rng.integers(6, len(s)))
        return s[:n], f"cut to {n} of {len(s)} bytes"
    extra = int(rng.integers(1, len(s) + 1))
    fill = rng.integers(0, 256, extra, dtype=np.uint8).tobytes() if rng.random() < 0.5 else b"\xff" * extra
    return s + fill, f"{extra} bytes appended"


SLICE_MUTATORS: dict[str, Callable[[Rng, bytes], tuple[bytes, str]]] = {
    "slice_bit_flip": s_bit_flip, "slice_garbage": s_garbage, "slice_ones": s_ones,
    "slice_zeros": s_zeros, "slice_header": s_header, "slice_resize": s_resize,
}

#: whole-packet mutators
PACKET_MUTATORS: dict[str, MutatorFn] = {
    "bit_flip": m_bit_flip, "byte_overwrite": m_byte_overwrite, "chunk": m_chunk,
    "truncate": m_truncate, "frame_field": m_frame_field, "picture_field": m_picture_field,
    "index_entry": m_index_entry,
}

#: relative weights: a bit over a third of the mutants damage a single slice
WEIGHTS = {
    "bit_flip": 12, "byte_overwrite": 8, "chunk": 4, "truncate": 8, "frame_field": 10,
    "picture_field": 8, "index_entry": 10, "slice_bit_flip": 9, "slice_garbage": 6,
    "slice_ones": 6, "slice_zeros": 6, "slice_header": 7, "slice_resize": 6,
}
MUTATORS = tuple(WEIGHTS)


def make_mutant(seeds: Sequence[Seed], seed: int, index: int,
                mutators: Sequence[str] = MUTATORS) -> Mutant:
    """Mutant ``index`` of run ``seed``: the same arguments give the same bytes."""
    rng = np.random.default_rng([seed, index])
    si = int(rng.integers(len(seeds)))
    s = seeds[si]
    w = np.array([WEIGHTS[m] for m in mutators], float)
    name = mutators[int(rng.choice(len(mutators), p=w / w.sum()))]
    if name in SLICE_MUTATORS:
        p, k, old = _slice(rng, s)
        new, detail = SLICE_MUTATORS[name](rng, old)
        if len(new) < 6:                      # shorter slices fail the whole frame (documented)
            new = new + bytes(6 - len(new))
        new = new[:0xFFFF]
        return Mutant(si, s.name, s.tag, name, f"picture {p} slice {k}: {detail}",
                      rebuild_packet(s.data, s.info, p, k, new), (p, k), new)
    data, detail = PACKET_MUTATORS[name](rng, s)
    return Mutant(si, s.name, s.tag, name, detail, data)


# ================================================================== slice isolation

def slice_mask(info: FrameInfo, picture: int, index: int, plane: str, shape: tuple[int, int]) -> np.ndarray:
    """Samples of ``plane`` that slice ``index`` of ``picture`` covers."""
    pic = info.pictures[picture]
    r = slice_rect(pic, pic.slices[index], plane, info.chroma_format, shape[0], shape[1])
    mask = np.zeros(shape, bool)
    mask[r.y:r.y + r.height * r.row_step:r.row_step, r.x:r.x + r.width] = True
    return mask


def isolation_violations(info: FrameInfo, picture: int, index: int, base: dict[str, np.ndarray],
                         got: dict[str, np.ndarray]) -> list[str]:
    """Where ``got`` differs from ``base`` outside slice ``index`` of ``picture``."""
    out = []
    if list(got) != list(base):
        return [f"planes {list(got)} instead of {list(base)}"]
    for plane, ref in base.items():
        arr = got[plane]
        if arr.shape != ref.shape:
            out.append(f"plane {plane}: shape {arr.shape} instead of {ref.shape}")
            continue
        bad = (arr != ref) & ~slice_mask(info, picture, index, plane, ref.shape)
        if bad.any():
            r, c = (int(v) for v in np.argwhere(bad)[0])
            out.append(f"plane {plane}: {int(bad.sum())} samples outside the slice differ, "
                       f"first at (row {r}, col {c}): {int(arr[r, c])} != {int(ref[r, c])}")
    return out


# ================================================================== workers

@dataclass
class Reply:
    """What one decode request came back with."""

    status: str                 # ok, corrupt, error, crash, hang, worker-error
    message: str = ""
    error: str = ""
    seconds: float = 0.0
    planes: dict | None = None
    validation: list[str] = field(default_factory=list)
    sanitizer: list[str] = field(default_factory=list)
    signal: int | None = None
    rss_kib: int = 0
    extra: dict = field(default_factory=dict)     # op-specific results (memory, samples)
    concealed: list | None = None                 # [picture, slice] of each concealed slice


def worker_env(validation: bool) -> dict[str, str]:
    """Environment the workers set before opening sessions."""
    env = {"PYPRORES_VALIDATION": "1" if validation else "0"}
    ignore = os.environ.get("PYPRORES_VALIDATION_IGNORE", "")
    env["PYPRORES_VALIDATION_IGNORE"] = ";".join(
        [*VALIDATION_NOISE, *(x for x in ignore.split(";") if x and x not in VALIDATION_NOISE)])
    return env


def sanitizer_preload(ffdir: Path) -> str | None:
    """libasan to preload when the FFmpeg build is a sanitizer build (its
    BUILDINFO names -fsanitize=address) and LD_PRELOAD does not have it yet."""
    info = ffdir / "BUILDINFO"
    if not info.is_file() or "fsanitize=address" not in info.read_text(errors="replace"):
        return None
    if "libasan" in os.environ.get("LD_PRELOAD", ""):
        return None
    for cc in ("cc", "gcc", "clang"):
        if shutil.which(cc):
            res = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True, text=True)
            path = res.stdout.strip()
            if res.returncode == 0 and os.path.isabs(path) and os.path.exists(path):
                return path
    raise PyproresError(f"{ffdir} is an ASan build but libasan.so was not found: "
                        "install the compiler's libasan or set LD_PRELOAD yourself")


class Worker:
    """A persistent child process decoding on one backend (restarted after a
    crash or a hang)."""

    def __init__(self, backend: str, device: str | None, logdir: Path, validation: bool,
                 startup_timeout: float = 600.0) -> None:
        self.backend = backend
        self.device = device
        self.logdir = logdir
        self.validation = validation
        self.startup_timeout = startup_timeout
        self.incarnation = 0
        self.proc: Any = None
        self.conn: Any = None
        self.log_path = logdir / f"{backend}.log"
        self.log_pos = 0
        self.keys: set = set()
        self.rss: list[tuple[int, int]] = []      # (incarnation, kib) per reply
        self.validation_enabled = False
        self.note = ""
        self.libavcodec = "?"

    def start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.incarnation += 1
        self.keys = set()
        ffdir = ffmpeg_dir()
        env = worker_env(self.validation)
        saved = {k: os.environ.get(k) for k in ("LD_LIBRARY_PATH", "LD_PRELOAD", "ASAN_OPTIONS")}
        preload = sanitizer_preload(ffdir)
        try:   # variables the dynamic loader reads must be there when the child starts
            os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(
                [str(ffdir / "lib"), *filter(None, [saved["LD_LIBRARY_PATH"]])])
            if preload:
                os.environ["LD_PRELOAD"] = preload
                os.environ.setdefault("ASAN_OPTIONS", "detect_leaks=0:abort_on_error=1")
            self.proc = ctx.Process(target=fuzz_worker.serve, daemon=True,
                                    args=(child, self.backend, self.device, str(self.log_path), env))
            self.proc.start()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        child.close()
        self.log_pos = self.log_path.stat().st_size if self.log_path.exists() else 0
        if not self.conn.poll(self.startup_timeout):
            self.kill()
            raise PyproresError(f"the {self.backend} worker did not start in {self.startup_timeout:.0f} s")
        try:
            hello = self.conn.recv()
        except EOFError:
            self.kill()
            raise PyproresError(f"the {self.backend} worker died while starting: "
                                f"{self._new_log()[-800:]}") from None
        if hello.get("status") != "ready":
            self.kill()
            raise PyproresError(f"the {self.backend} worker could not start: "
                                f"{hello.get('error')}: {hello.get('message')}")
        self.validation_enabled = bool(hello.get("validation"))
        self.note = hello.get("note") or ""          # e.g. why validation is off on its device
        self.libavcodec = hello.get("libavcodec", "?")

    def _new_log(self) -> str:
        try:
            size = self.log_path.stat().st_size
        except OSError:
            return ""
        if size <= self.log_pos:
            return ""
        with open(self.log_path, "rb") as f:
            f.seek(self.log_pos)
            text = f.read(size - self.log_pos).decode("utf-8", "replace")
        self.log_pos = size
        return text

    def kill(self) -> None:
        if self.proc is not None and self.proc.is_alive():
            self.proc.kill()
        if self.proc is not None:
            self.proc.join(10)
        self.proc = None
        if self.conn is not None:
            self.conn.close()
        self.conn = None

    def stop(self) -> None:
        """Let the worker leave without closing its sessions (see fuzz_worker)."""
        if self.proc is not None and self.proc.is_alive():
            try:
                self.conn.send({"op": "exit"})
                self.proc.join(30)
            except (OSError, BrokenPipeError):
                pass
        self.kill()

    def request(self, req: dict, timeout: float, key: Any = None) -> Reply:
        if self.proc is None:
            self.start()
        if key is not None and key not in self.keys:   # first frame of a key: pipelines compile
            timeout = max(timeout, self.startup_timeout)
        try:
            self.conn.send(req)
            ready = self.conn.poll(timeout)
        except (OSError, BrokenPipeError):
            ready = True
        if not ready:
            self.kill()
            return Reply("hang", message=f"no answer in {timeout:.0f} s", sanitizer=self._sanitizer())
        try:
            out = self.conn.recv()
        except (EOFError, OSError):
            self.proc.join(10)
            code = self.proc.exitcode
            self.kill()
            log = self._new_log()
            return Reply("crash", message=f"worker exit code {code}; {log[-600:]}",
                         signal=-code if code is not None and code < 0 else None,
                         sanitizer=_sanitizer_lines(log))
        if key is not None:
            self.keys.add(key)
        reply = Reply(out["status"], message=out.get("message", ""), error=out.get("error", ""),
                      seconds=out.get("seconds", 0.0), planes=out.get("planes"),
                      validation=out.get("validation", []), sanitizer=self._sanitizer(),
                      rss_kib=out.get("rss_kib", 0), concealed=out.get("concealed"),
                      extra={k: v for k, v in out.items() if k in ("memory", "samples", "errors", "statuses")})
        self.rss.append((self.incarnation, reply.rss_kib))
        if out.get("recycle"):
            self.stop()
        return reply

    def _sanitizer(self) -> list[str]:
        return _sanitizer_lines(self._new_log())


def _sanitizer_lines(text: str) -> list[str]:
    return [line.strip()[:300] for line in text.splitlines() if any(m in line for m in SANITIZER_MARKS)]


def stream_key(packet: bytes, tag: str) -> Any:
    """(tag, width, height) of the decoder a packet needs, None when its frame
    header is refused: the first packet of a new key may compile pipelines."""
    if len(packet) < 28 or packet[4:8] != b"icpf":
        return None
    return (tag, struct.unpack_from(">H", packet, 16)[0], struct.unpack_from(">H", packet, 18)[0],
            packet[20] & 0xC0, packet[25] & 0x0F)


# ================================================================== the run

@dataclass
class FuzzConfig:
    inputs: list[str] = field(default_factory=list)
    seed: int = 1
    count: int | None = 1000
    time_limit: float | None = None
    backends: tuple[str, ...] = BACKENDS
    device: str | None = None
    timeout: float = 30.0
    validation: bool = True
    frames: int = 1
    tag: str = "apch"
    mutators: tuple[str, ...] = MUTATORS
    minimise: bool = True
    save_regressions: str | None = None
    workdir: str | None = None
    command: str = ""
    inject: dict[int, str] = field(default_factory=dict)   # mutant index -> selftest-crash/-hang


@dataclass
class BackendStats:
    mutants: int = 0
    ok: int = 0
    corrupt: int = 0
    error: int = 0
    crash: int = 0
    hang: int = 0
    worker_error: int = 0
    validation_messages: int = 0
    sanitizer_reports: int = 0
    isolation_checked: int = 0
    isolation_failed: int = 0
    isolation_refused: int = 0
    decode_seconds: float = 0.0
    worker_restarts: int = 0
    rss_start_kib: int = 0
    rss_end_kib: int = 0
    rss_max_kib: int = 0


@dataclass
class Finding:
    kind: str          # crash, hang, validation, sanitizer, isolation, worker-error
    backend: str
    index: int
    seed_name: str
    tag: str
    mutator: str
    detail: str
    message: str
    signal: int | None = None
    minimised: dict | None = None
    saved: str | None = None


@dataclass
class FuzzReport:
    command: str
    date: str
    machine: str
    seed: int
    seeds: list[str]
    seeds_digest: str
    backends: dict[str, BackendStats]
    devices: dict[str, str]
    validation: dict[str, bool]
    sanitizer_build: bool
    libavcodec: dict[str, str]
    mutants: int
    seconds: float
    by_mutator: dict[str, dict[str, int]]
    outcome_pairs: dict[str, int]
    findings: list[Finding]
    #: damage agreement (both backends run): checked, agree, disagree, and for
    #: mutants both flag corrupt, slice_sets_checked / slice_sets_equal
    damage: dict[str, int] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(s.crash == s.hang == s.worker_error == s.validation_messages
                   == s.sanitizer_reports == s.isolation_failed == 0
                   for s in self.backends.values()) and not self.damage.get("disagree", 0)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["passed"] = self.passed
        return d


def _machine() -> str:
    return f"{platform.node()}: {os.cpu_count()} CPUs, {platform.platform()}"


class Fuzzer:
    """Generates mutants, runs them on the workers and counts what happens."""

    def __init__(self, config: FuzzConfig, seeds: Sequence[Seed], logdir: Path,
                 progress: Callable[[int, int | None], None] | None = None) -> None:
        self.cfg = config
        self.seeds = list(seeds)
        self.progress = progress
        self.workers = {b: Worker(b, config.device, logdir, config.validation and b == "vulkan")
                        for b in config.backends}
        self.stats = {b: BackendStats() for b in config.backends}
        self.by_mutator: dict[str, Counter] = {}
        self.findings: list[Finding] = []
        self.base: dict[tuple[str, int], dict | None] = {}
        self.pairs: Counter = Counter()      # "software status/vulkan status" per mutant
        self.damage: Counter = Counter()     # damage agreement, see FuzzReport.damage

    # -- one decode -------------------------------------------------------------
    def _decode(self, backend: str, m: Mutant, planes: bool, op: str = "decode") -> Reply:
        req: dict[str, Any] = {"op": op, "data": m.data, "tag": m.tag, "planes": planes}
        key = stream_key(m.data, m.tag)
        if m.slice is not None:
            seed = self.seeds[m.seed_index]
            req["slice"] = {"packet": seed.data, "picture": m.slice[0], "index": m.slice[1],
                            "bytes": m.slice_data}
            key = stream_key(seed.data, m.tag)
        w = self.workers[backend]
        restarts = w.incarnation
        reply = w.request(req, self.cfg.timeout, key)
        if w.incarnation != restarts:
            self.stats[backend].worker_restarts += 1
        return reply

    def base_planes(self, backend: str, si: int) -> dict | None:
        """The unmodified seed packet's decode on ``backend`` (cached)."""
        if (backend, si) not in self.base:
            s = self.seeds[si]
            m = Mutant(si, s.name, s.tag, "none", "", s.data)
            r = self._decode(backend, m, planes=True)
            self.base[(backend, si)] = r.planes if r.status == "ok" else None
            if r.status != "ok":
                self._finding("seed-failed", backend, -1, m, f"the seed itself: {r.status} {r.message}")
        return self.base[(backend, si)]

    # -- bookkeeping ---------------------------------------------------------------
    def _finding(self, kind: str, backend: str, index: int, m: Mutant, message: str,
                 sig: int | None = None) -> None:
        self.findings.append(Finding(kind, backend, index, m.seed_name, m.tag, m.mutator, m.detail,
                                     message[:1500], sig))

    def _count(self, backend: str, index: int, m: Mutant, r: Reply) -> None:
        st = self.stats[backend]
        st.mutants += 1
        st.decode_seconds += r.seconds
        status = r.status.replace("-", "_")
        setattr(st, status, getattr(st, status) + 1)
        self.by_mutator.setdefault(m.mutator, Counter())[f"{backend}:{r.status}"] += 1
        if r.status in ("crash", "hang", "worker-error"):
            self._finding(r.status, backend, index, m, r.message, r.signal)
        if r.validation:
            st.validation_messages += len(r.validation)
            self._finding("validation", backend, index, m, "\n".join(r.validation[:5]))
        if r.sanitizer:
            st.sanitizer_reports += len(r.sanitizer)
            self._finding("sanitizer", backend, index, m, "\n".join(r.sanitizer[:5]))
        if r.rss_kib:
            if not st.rss_start_kib:
                st.rss_start_kib = r.rss_kib
            st.rss_end_kib = r.rss_kib
            st.rss_max_kib = max(st.rss_max_kib, r.rss_kib)

    def _isolation(self, backend: str, index: int, m: Mutant, r: Reply) -> None:
        st = self.stats[backend]
        if r.status not in ("ok", "corrupt"):
            st.isolation_refused += 1
            return
        base = self.base_planes(backend, m.seed_index)
        if base is None or r.planes is None:
            return
        st.isolation_checked += 1
        bad = isolation_violations(self.seeds[m.seed_index].info, m.slice[0], m.slice[1], base, r.planes)
        if bad:
            st.isolation_failed += 1
            self._finding("isolation", backend, index, m, "; ".join(bad[:4]))

    def _damage(self, index: int, m: Mutant, sw: Reply, vk: Reply) -> None:
        """Do both decoders output the frame with the same flag, or both
        refuse it (:func:`damage_agrees`; the software worker decodes with
        one thread, the reference)? Crashes and hangs are findings of their
        own."""
        if sw.status not in CLEAN or vk.status not in CLEAN:
            return
        self.damage["checked"] += 1
        if not damage_agrees(sw.status, vk.status):
            self.damage["disagree"] += 1
            self._finding("damage", "vulkan", index, m,
                          f"software {sw.status}, vulkan {vk.status}: {(sw.message or vk.message)[:300]}")
            return
        self.damage["agree"] += 1
        if sw.status == vk.status == "corrupt" and sw.concealed is not None and vk.concealed is not None:
            self.damage["slice_sets_checked"] += 1
            a, b = sorted(map(tuple, sw.concealed)), sorted(map(tuple, vk.concealed))
            if a == b:
                self.damage["slice_sets_equal"] += 1
            elif self.damage["slice_sets_checked"] - self.damage["slice_sets_equal"] <= 20:
                self._finding("slices", "vulkan", index, m,
                              f"concealed slices (picture, slice): software {a[:8]}, vulkan {b[:8]}")

    # -- the loop --------------------------------------------------------------------
    def run_one(self, index: int) -> Mutant:
        m = make_mutant(self.seeds, self.cfg.seed, index, self.cfg.mutators)
        statuses = []
        replies = {}
        for backend in self.cfg.backends:
            iso = m.slice is not None
            if iso:
                self.base_planes(backend, m.seed_index)   # before the mutant: a clean baseline
            op = self.cfg.inject.get(index, "decode") if backend == self.cfg.backends[0] else "decode"
            r = self._decode(backend, m, planes=iso, op=op)
            self._count(backend, index, m, r)
            statuses.append(r.status)
            replies[backend] = r
            if iso:
                self._isolation(backend, index, m, r)
        self.pairs["/".join(statuses)] += 1
        if "software" in replies and "vulkan" in replies:
            self._damage(index, m, replies["software"], replies["vulkan"])
        return m

    def run(self) -> int:
        start = time.monotonic()
        n = 0
        try:
            for b in self.cfg.backends:
                self.workers[b].start()
                self.stats[b].rss_start_kib = 0
            while (self.cfg.count is None or n < self.cfg.count) and \
                    (self.cfg.time_limit is None or time.monotonic() - start < self.cfg.time_limit):
                self.run_one(n)
                n += 1
                if self.progress:
                    self.progress(n, self.cfg.count)
        finally:
            for w in self.workers.values():
                w.stop()
        return n

    def close(self) -> None:
        for w in self.workers.values():
            w.stop()


class LogProgress:
    """Progress for logs (stderr not a terminal): one line a minute."""

    def __init__(self, every: float = 60.0) -> None:
        self.every = every
        self.start = self.last = time.monotonic()

    def __call__(self, done: int, total: int | None) -> None:
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            print(f"fuzz: {done}{f'/{total}' if total else ''} mutants, {now - self.start:.0f} s",
                  file=sys.stderr, flush=True)

    def finish(self) -> None:
        pass


# ================================================================== minimisation

def ddmin_positions(original: bytes, mutant: bytes, fails: Callable[[bytes], bool],
                    max_tests: int = 64) -> bytes:
    """Revert as many of the mutant's changed bytes to the original as
    possible while ``fails`` still holds (Zeller's ddmin over byte positions).
    Only for mutants of the original's length; others come back unchanged."""
    if len(original) != len(mutant):
        return mutant
    diff = [i for i in range(len(mutant)) if mutant[i] != original[i]]
    tests = 0

    def build(keep: Sequence[int]) -> bytes:
        b = bytearray(original)
        for i in keep:
            b[i] = mutant[i]
        return bytes(b)

    n = 2
    while len(diff) >= 2 and tests < max_tests:
        chunk = max(1, len(diff) // n)
        parts = [diff[i:i + chunk] for i in range(0, len(diff), chunk)]
        reduced = False
        for part in parts:
            rest = [i for i in diff if i not in set(part)]
            tests += 1
            if rest and fails(build(rest)):
                diff, n, reduced = rest, max(n - 1, 2), True
                break
            if tests >= max_tests:
                break
        if not reduced:
            if n >= len(diff):
                break
            n = min(len(diff), n * 2)
    return build(diff)


def minimise(finding: Finding, mutant: Mutant, seed: Seed, worker: Worker, timeout: float) -> bytes:
    """The smallest change of the seed packet that still crashes or hangs."""
    def fails(data: bytes) -> bool:
        r = worker.request({"op": "decode", "data": data, "tag": mutant.tag, "planes": False},
                           timeout, stream_key(data, mutant.tag))
        return r.status == finding.kind
    return ddmin_positions(seed.data, mutant.data, fails)


def save_regression(directory: str | os.PathLike, name: str, data: bytes, tag: str,
                    description: str, found_by: str, status: str = "open",
                    expect: Sequence[str] = CLEAN) -> Path:
    """Write ``name``.bin and its entry in ``directory``/index.json."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{name}.bin").write_bytes(data)
    index = d / "index.json"
    doc = json.loads(index.read_text()) if index.is_file() else {"schema": "pyprores-regressions/1",
                                                                  "inputs": []}
    doc["inputs"] = [e for e in doc["inputs"] if e.get("file") != f"{name}.bin"]
    doc["inputs"].append({"file": f"{name}.bin", "codec_tag": tag, "description": description,
                          "found_by": found_by, "status": status,
                          "expect": {b: list(expect) for b in BACKENDS}})
    index.write_text(json.dumps(doc, indent=1) + "\n")
    return d / f"{name}.bin"


def load_regressions(directory: str | os.PathLike) -> list[dict]:
    """Entries of ``directory``/index.json (empty when there is none)."""
    index = Path(directory) / "index.json"
    if not index.is_file():
        return []
    doc = json.loads(index.read_text())
    if doc.get("schema") != "pyprores-regressions/1":
        raise PyproresError(f"{index}: schema {doc.get('schema')!r}, not 'pyprores-regressions/1'")
    return list(doc.get("inputs", []))


def run_regression(entry: dict, directory: str | os.PathLike, worker: Worker,
                   timeout: float = 60.0) -> list[Reply]:
    """Decode a regression input on ``worker``: the packets named in
    ``before`` first, then the input, the whole sequence ``repeat`` times
    (state-dependent bugs such as a decoder reopen need a sequence). Stops
    at the first crash or hang."""
    d = Path(directory)
    steps = [*entry.get("before", []), {"file": entry["file"], "codec_tag": entry["codec_tag"]}]
    packets = [((d / st["file"]).read_bytes(), st["codec_tag"]) for st in steps]
    repeat = int(entry.get("repeat", 1))
    if len(packets) == 1 and repeat == 1:
        data, tag = packets[0]
        return [worker.request({"op": "decode", "data": data, "tag": tag, "planes": False},
                               timeout, stream_key(data, tag))]
    # no first-frame allowance: a sequence of frames of new formats compiles
    # pipelines, which takes seconds without the validation layer, minutes with it
    r = worker.request({"op": "sequence", "packets": packets, "repeat": repeat},
                       float(entry.get("timeout", timeout)))
    if r.status != "ok":
        return [r]
    replies = [Reply(st if st in CLEAN else "error", message=st) for st in r.extra["statuses"]]
    if replies:
        replies[-1].validation, replies[-1].sanitizer = r.validation, r.sanitizer
    else:
        replies = [r]
    return replies


# ================================================================== entry points

def run(config: FuzzConfig, progress: Callable[[int, int | None], None] | None = None) -> FuzzReport:
    """Make or load the seeds, fuzz, minimise what crashed or hung; the report."""
    work = Path(config.workdir) if config.workdir else Path(tempfile.mkdtemp(prefix="pyprores-fuzz-"))
    work.mkdir(parents=True, exist_ok=True)
    inputs = config.inputs or [str(p) for p in make_default_seeds(work / "seeds")]
    seeds = load_seeds(inputs, config.frames, config.tag)
    if not seeds:
        raise PyproresError("no usable seed packet in the inputs (they must be ProRes frames that decode)")
    fz = Fuzzer(config, seeds, work, progress)
    t0 = time.monotonic()
    n = fz.run()
    seconds = time.monotonic() - t0
    _minimise_findings(fz, config, work)
    return FuzzReport(
        command=config.command, date=datetime.date.today().isoformat(), machine=_machine(),
        seed=config.seed, seeds=[s.name for s in seeds], seeds_digest=seeds_digest(seeds),
        backends=fz.stats, devices={b: _device_name(b, config.device) for b in config.backends},
        validation={b: w.validation_enabled for b, w in fz.workers.items()},
        sanitizer_build=sanitizer_preload(ffmpeg_dir()) is not None or "libasan" in os.environ.get("LD_PRELOAD", ""),
        libavcodec={b: w.libavcodec for b, w in fz.workers.items()}, mutants=n, seconds=round(seconds, 1),
        by_mutator={k: dict(v) for k, v in sorted(fz.by_mutator.items())},
        outcome_pairs=dict(fz.pairs.most_common()), findings=fz.findings, damage=dict(fz.damage))


def _device_name(backend: str, device: str | None) -> str:
    if backend == "software":
        return "cpu"
    from ..decode import native
    try:   # validation off: only the name is wanted, and closing is then instant
        old = os.environ.get("PYPRORES_VALIDATION")
        os.environ["PYPRORES_VALIDATION"] = "0"
        with native.Session("vulkan", device, require_hwaccel=False) as s:
            return s.device_name
    except PyproresError as e:
        return f"? ({e})"
    finally:
        if old is None:
            os.environ.pop("PYPRORES_VALIDATION", None)
        else:
            os.environ["PYPRORES_VALIDATION"] = old


def _minimise_findings(fz: Fuzzer, config: FuzzConfig, work: Path) -> None:
    done: set[tuple[str, str, int]] = set()
    for f in fz.findings:
        if f.kind not in ("crash", "hang") or (f.kind, f.backend, f.index) in done or f.index in config.inject:
            continue
        done.add((f.kind, f.backend, f.index))
        m = make_mutant(fz.seeds, config.seed, f.index, config.mutators)
        seed = fz.seeds[m.seed_index]
        data = m.data
        if config.minimise:
            w = Worker(f.backend, config.device, work, config.validation and f.backend == "vulkan")
            try:
                data = minimise(f, m, seed, w, config.timeout)
            finally:
                w.stop()
        changed = sum(a != b for a, b in zip(data, seed.data)) + abs(len(data) - len(seed.data))
        f.minimised = {"bytes": len(data), "changed_bytes": changed,
                       "sha256": hashlib.sha256(data).hexdigest()[:16]}
        if config.save_regressions:
            name = f"{f.kind}-{f.backend}-s{config.seed}-i{f.index}"
            path = save_regression(config.save_regressions, name, data, m.tag,
                                   f"{f.kind} on {f.backend}: {m.mutator} ({m.detail}) of {m.seed_name}; "
                                   f"{f.message[:200]}",
                                   f"pyprores fuzz --seed {config.seed} --reproduce {f.index}")
            f.saved = str(path)


def reproduce(config: FuzzConfig, index: int) -> tuple[Mutant, Seed]:
    """Mutant ``index`` of ``config``'s run, regenerated."""
    work = Path(config.workdir) if config.workdir else Path(tempfile.mkdtemp(prefix="pyprores-fuzz-"))
    inputs = config.inputs or [str(p) for p in make_default_seeds(work / "seeds")]
    seeds = load_seeds(inputs, config.frames, config.tag)
    m = make_mutant(seeds, config.seed, index, config.mutators)
    return m, seeds[m.seed_index]


# ================================================================== reports

COLUMNS = ("mutants", "ok", "corrupt", "error", "crash", "hang", "validation_messages",
           "sanitizer_reports", "isolation_checked", "isolation_failed")
HEADS = ("mutants", "decoded", "flagged corrupt", "clean error", "crashes", "hangs",
         "validation msgs", "sanitizer reports", "isolation checks", "isolation failures")


def format_table(report: FuzzReport) -> str:
    """The summary as a Markdown table (one row per backend) plus totals."""
    lines = ["| backend | " + " | ".join(HEADS) + " | RSS start → end (max), MiB |",
             "| --- | " + " | ".join("---:" for _ in HEADS) + " | --- |"]
    for b, st in report.backends.items():
        vals = [str(getattr(st, c)) for c in COLUMNS]
        rss = f"{st.rss_start_kib / 1024:.0f} → {st.rss_end_kib / 1024:.0f} ({st.rss_max_kib / 1024:.0f})"
        lines.append(f"| {b} | " + " | ".join(vals) + f" | {rss} |")
    return "\n".join(lines)


def format_damage(report: FuzzReport) -> str:
    """One line on damage agreement ("" when only one backend ran)."""
    d = report.damage
    if not d.get("checked"):
        return ""
    line = (f"Damage agreement: {d.get('agree', 0)} of {d['checked']} mutants alike "
            f"(both clean, both flagged corrupt, or both refused), {d.get('disagree', 0)} not")
    if d.get("slice_sets_checked"):
        line += (f"; of {d['slice_sets_checked']} frames both flagged corrupt, "
                 f"{d.get('slice_sets_equal', 0)} with the same concealed slices")
    return line + "."


def format_text(report: FuzzReport) -> str:
    lines = [f"pyprores fuzz: {report.mutants} mutants in {report.seconds:.0f} s, seed {report.seed}, "
             f"{len(report.seeds)} seed packets (digest {report.seeds_digest})",
             "devices: " + ", ".join(f"{b}: {d}" + (" + validation layer" if report.validation.get(b) else "")
                                     for b, d in report.devices.items())
             + ("; ASan/UBSan build" if report.sanitizer_build else ""),
             "libavcodec: " + ", ".join(sorted(set(report.libavcodec.values()))),
             "", format_table(report), "",
             "outcomes per mutant (" + "/".join(report.backends) + "): "
             + ", ".join(f"{k} {v}" for k, v in report.outcome_pairs.items()),
             format_damage(report), ""]
    for f in report.findings[:20]:
        lines.append(f"{f.kind} on {f.backend}: mutant {f.index} ({f.mutator}: {f.detail[:100]}) of "
                     f"{f.seed_name}: {f.message.splitlines()[0][:200] if f.message else ''}"
                     + (f" -> saved {f.saved}" if f.saved else ""))
    if len(report.findings) > 20:
        lines.append(f"... {len(report.findings) - 20} more findings in the JSON report")
    lines.append("PASS: no crash, hang, validation message, sanitizer report, isolation failure "
                 "or damage disagreement" if report.passed else "FAIL")
    return "\n".join(lines)


def format_markdown(report: FuzzReport) -> str:
    """A section for docs/ROBUSTNESS.md."""
    return "\n".join([
        f"Run of {report.date} on {report.machine}:",
        "",
        "```sh", report.command, "```", "",
        f"{report.mutants} mutants per backend in {report.seconds / 60:.1f} min "
        f"(seed {report.seed}, {len(report.seeds)} seed packets, digest {report.seeds_digest}); "
        "devices: " + ", ".join(f"{b}: {d}" + (" with the validation layer" if report.validation.get(b) else "")
                                for b, d in report.devices.items()) + ".",
        "", format_table(report), "",
        "Outcomes per mutant (" + " / ".join(report.backends) + "): "
        + ", ".join(f"{k} {v}" for k, v in report.outcome_pairs.items()) + ".", "",
        format_damage(report), "",
        f"Result: {'pass' if report.passed else 'FAIL'} ({len(report.findings)} findings).", ""])


def write_reports(report: FuzzReport, out: str | os.PathLike) -> list[Path]:
    """``out``.json and ``out``.md (``out`` may end in .json)."""
    base = Path(out)
    if base.suffix in (".json", ".md"):
        base = base.with_suffix("")
    base.parent.mkdir(parents=True, exist_ok=True)
    # appended, not with_suffix(): "fuzz-9.0.2" keeps its ".2"
    j, md = base.with_name(base.name + ".json"), base.with_name(base.name + ".md")
    j.write_text(json.dumps(report.to_dict(), indent=1, default=str) + "\n")
    md.write_text(format_markdown(report))
    return [j, md]
