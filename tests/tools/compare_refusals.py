#!/usr/bin/env python3
"""Frame by frame, what ffmpeg's decoders do with a damaged ProRes stream
(issue 35): which frames come out, which are flagged corrupt, which are
refused and with what error.

    tests/tools/compare_refusals.py [--build DIR]... FILE.mov...

decodes each file with the software decoder (``-threads 1``, the reference:
frame threads lose flags, an FFmpeg bug) and with the Vulkan hwaccel (frame
threads, ffmpeg's default) of each build, with ``-err_detect`` off and with
every detection flag, and prints per frame the outcome of each (``ok``,
``corrupt``, ``error``) where any differs from the reference's, then a
summary line per run. ``--json`` prints everything. Exit status 1 when a
Vulkan run with every detection flag differs from the reference in frames
out, flags, error messages or the samples of intact frames.

``tests/test_refusals.py`` uses :func:`decode` on the build under test.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

#: every -err_detect flag that asks for detection (ignore_err asks for none)
ALL_FLAGS = "crccheck+bitstream+buffer+explode+careful+compliant+aggressive"
MODES = {"default": [], "all": ["-err_detect", ALL_FLAGS]}

#: what proresdec.c logs when it refuses a frame or picture before decoding
#: any slice: each must be logged as often by the hwaccel path
PICTURE_ERRORS = ("invalid frame header", "error, wrong header size", "unsupported version",
                  "Invalid alpha mode", "Header truncated", "is invalid",
                  "error, wrong picture header size", "error, wrong picture data size",
                  "unsupported slice resolution", "error, wrong slice count",
                  "error, wrong slice data size", "error, slice out of bounds", "error wrong mb count",
                  "error decoding picture header")



def hw_args(device: str = "0") -> list[str]:
    return ["-init_hw_device", f"vulkan=vk:{device}", "-hwaccel", "vulkan", "-hwaccel_output_format", "vulkan"]


@dataclass
class Run:
    """One decode of a stream: per input frame (by pts), its outcome."""

    ffmpeg: str
    vulkan: bool
    mode: str
    returncode: int
    #: per frame: "ok", "corrupt" or "error" (not output)
    outcomes: list[str]
    #: per frame output: the MD5 of its samples, else None
    md5: list[str | None]
    #: how often each picture-level error of PICTURE_ERRORS was logged
    errors: dict[str, int] = field(default_factory=dict)
    stderr_tail: str = ""
    stderr: str = field(default="", repr=False)


def _pix_fmt(path: Path) -> str:
    """The software format of the stream's first frame (an intact one)."""
    import av
    sys.path.insert(0, str(REPO))
    from pyprores.bitstream import parse_frame
    with av.open(str(path)) as c:
        st = c.streams.video[0]
        tag = st.codec_context.codec_tag
        return parse_frame(bytes(next(p for p in c.demux(st) if p.size)), tag).pix_fmt


def decode(ffmpeg: Path, path: Path, pts: list[int], vulkan: bool, mode: str = "all",
           env: dict | None = None, timeout: float = 600, device: str = "0") -> Run:
    """Decode ``path``, whose packets have the timestamps ``pts``
    (:func:`packet_pts`), with ``ffmpeg``: software with one thread, or the
    Vulkan hwaccel (frame threads; frames downloaded)."""
    args = [str(ffmpeg), "-hide_banner", "-nostdin", "-v", "info", "-debug_ts", *MODES[mode]]
    if vulkan:
        args += [*hw_args(device), "-i", str(path), "-vf", f"hwdownload,format={_pix_fmt(path)}"]
    else:
        args += ["-threads", "1", "-i", str(path)]
    args += ["-fps_mode", "passthrough", "-f", "framemd5", "-"]
    res = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env)
    frame_of = {p: i for i, p in enumerate(pts)}
    outcomes, md5 = ["error"] * len(pts), [None] * len(pts)
    # Lines of the decoder thread and others can run into one another:
    # search the whole text, in order, rather than line by line.
    events = sorted([(m.start(), "corrupt", 0) for m in re.finditer("corrupt decoded frame", res.stderr)] +
                    [(m.start(), "frame", int(m.group(1)))
                     for m in re.finditer(r"decoder -> pts:(-?\d+) ", res.stderr)])
    pending_corrupt, seen = False, []
    for _, kind, p in events:
        if kind == "corrupt":
            pending_corrupt = True
            continue
        seen.append(p)
        if p in frame_of:
            outcomes[frame_of[p]] = "corrupt" if pending_corrupt else "ok"
        pending_corrupt = False
    rows = [line.split(",") for line in res.stdout.splitlines() if line and line[0] != "#"]
    for r in rows:
        if int(r[1]) in frame_of:
            md5[frame_of[int(r[1])]] = r[-1].strip()
    errors = {e: res.stderr.count(e) for e in PICTURE_ERRORS if e in res.stderr}
    tail = "\n".join(res.stderr.splitlines()[-30:])
    if res.returncode >= 0 and (len(seen) != len(rows) or len(set(seen)) != len(seen)
                                or not set(seen) <= set(frame_of)):
        raise RuntimeError(f"{path}: frames {seen[:40]} decoded, {len(rows)} in the framemd5 output, "
                           f"packets {pts[:40]}:\n{tail}")
    return Run(str(ffmpeg), vulkan, mode, res.returncode, outcomes, md5, errors, tail, res.stderr)


def differences(ref: Run, run: Run, content: list[bool] | None = None) -> list[str]:
    """What ``run`` does otherwise than ``ref``: outcomes per frame, error
    messages, and the samples of frames both output intact (where
    ``content`` says they are defined)."""
    out = [f"ffmpeg died of signal {-run.returncode}"] if run.returncode < 0 else []
    out += [f"frame {i}: {a} on the reference, {b} here"
            for i, (a, b) in enumerate(zip(ref.outcomes, run.outcomes)) if a != b]
    if ref.errors != run.errors:
        out.append(f"picture errors logged: reference {ref.errors}, here {run.errors}")
    for i, (a, b) in enumerate(zip(ref.md5, run.md5)):
        if a and b and a != b and ref.outcomes[i] == run.outcomes[i] == "ok" and (content is None or content[i]):
            out.append(f"frame {i}: samples differ (md5 {a} / {b})")
    return out


def packet_pts(path: Path) -> list[int]:
    """The timestamps of the packets of the first video stream (damaged ones
    included), in the stream's time base, as ffmpeg -debug_ts prints them."""
    import av
    with av.open(str(path)) as c:
        return [p.pts for p in c.demux(c.streams.video[0]) if p.size]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+", type=Path)
    ap.add_argument("--build", action="append", type=Path,
                    help="an FFmpeg install (DIR/bin/ffmpeg); default build/ffmpeg and build/ffmpeg-9.0.2. "
                         "The first one's software decoder is the reference")
    ap.add_argument("--device", default="0", help="Vulkan device (index or name; default 0)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    builds = args.build or [p for p in (REPO / "build" / "ffmpeg", REPO / "build" / "ffmpeg-9.0.2") if p.exists()]
    def env(build: Path) -> dict:
        """Each build with its own libraries (packed builds: tools/gpu/gpu-run exports the first's)."""
        e = dict(os.environ)
        e["LD_LIBRARY_PATH"] = os.pathsep.join(x for x in (str(build / "lib"), e.get("LD_LIBRARY_PATH")) if x)
        return e

    report, failed = [], False
    for path in args.files:
        pts = packet_pts(path)
        n = len(pts)
        ref = decode(builds[0] / "bin" / "ffmpeg", path, pts, vulkan=False, env=env(builds[0]))
        runs = [decode(b / "bin" / "ffmpeg", path, pts, vulkan=True, mode=m, env=env(b), device=args.device)
                for b in builds for m in MODES]
        item = {"file": str(path), "reference": {**asdict(ref), "stderr": None}, "runs": []}
        if not args.json:
            print(f"{path.name}: {n} frames; reference (software, 1 thread): "
                  f"{Counter(ref.outcomes)}")
        for r in runs:
            diff = differences(ref, r)
            failed |= r.mode == "all" and bool(diff)
            item["runs"].append({**asdict(r), "stderr": None, "differences": diff})
            if not args.json:
                label = f"  vulkan {Path(r.ffmpeg).parent.parent.name} err_detect={r.mode}"
                print(f"{label}: {Counter(r.outcomes)}; {len(diff)} differences")
                for d in diff[:12]:
                    print(f"    {d}")
        report.append(item)
    if args.json:
        print(json.dumps(report, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
