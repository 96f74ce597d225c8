"""The same damaged frames are reported with frame threads as with one thread (issue 31).

``ffmpeg`` seemed to flag a varying number of damaged ProRes frames with frame
threads (2 or 3 of 3 "corrupt decoded frame" lines from run to run with
``-threads 0/2/3/4/8``, always 3 with ``-threads 1``). The decoder's
``decode_error_flags`` are the same every run; the lines are not: ffmpeg sets
``AV_LOG_SKIP_REPEATED``, the line was the same for every frame, and with frame
threads the lines of two consecutive damaged frames can come back to back (the
decoder threads logged their own errors earlier), so the second one is folded
into "Last message repeated 1 times". The fix
(``ffmpeg_patches/master/3-robustness/flag-race.patch``, "fftools/ffmpeg_dec: say
which frame is corrupt") names the frame in the line.

The test decodes one damaged clip (made here from the build's own ``prores_ks``
output, damaged at seeded slices of 5 of its 8 frames, 3 of them consecutive)
many times with frame threads, and expects every run to report the same lines
as ``-threads 1``, and the same pixels in the clean frames. It fails on unpatched
FFmpeg (a run reports fewer lines) and passes with the fix.

Build under test: ``$PYPRORES_FLAGRACE_FFMPEG`` (an ``ffmpeg`` executable or an
install with ``bin/ffmpeg``), else ``build/ffmpeg-master`` (``scripts/setup
--series master``); skipped when neither is there. Runs: ``$PYPRORES_FLAGRACE_RUNS``
(default 30).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

from pyprores import builds
from pyprores.decode import demux
from pyprores.bitstream import parse_frame

ENV_FFMPEG = "PYPRORES_FLAGRACE_FFMPEG"
RUNS = int(os.environ.get("PYPRORES_FLAGRACE_RUNS", "30"))
SEED = 31
SIZE = "1920x1080"
FRAMES = 8
DAMAGED = (1, 2, 3, 5, 6)           # frames 0, 4 and 7 stay clean
SLICES_PER_FRAME = 4
THREADS = (2, 3, 4, 8, 0)           # frame-thread counts, taken in turn
ERR_DETECT = "+crccheck+bitstream+buffer+careful+compliant+aggressive"
LINE = re.compile(r"corrupt decoded frame(?: (\d+))?\s*$")

pytestmark = pytest.mark.slow


def ffmpeg_under_test() -> Path:
    env = os.environ.get(ENV_FFMPEG)
    if env:
        p = Path(env)
        exe = p / "bin" / "ffmpeg" if p.is_dir() else p
        if not exe.is_file():
            pytest.fail(f"{ENV_FFMPEG}={env}: no ffmpeg executable there")
        return exe
    exe = builds.ffmpeg_dir("master") / "bin" / "ffmpeg"
    if not exe.is_file():
        pytest.skip(f"no master build at {exe.parent.parent}: scripts/setup --series master "
                    f"builds it, or set {ENV_FFMPEG} to an ffmpeg executable")
    return exe


def damage(packet: bytes, rng: np.random.Generator) -> bytes:
    """``packet`` with SLICES_PER_FRAME slices of its second half (picked by ``rng``)
    claiming 65535 bytes of luma: each of them fails ("invalid plane data size"),
    the frame is flagged, the rest of it decodes."""
    slices = parse_frame(packet).pictures[0].slices
    half = slices[len(slices) // 2:]
    bad = bytearray(packet)
    for i in sorted(rng.choice(len(half), SLICES_PER_FRAME, replace=False)):
        bad[half[i].offset + 2:half[i].offset + 4] = b"\xff\xff"
    return bytes(bad)


@pytest.fixture(scope="module")
def ffmpeg() -> Path:
    return ffmpeg_under_test()


@pytest.fixture(scope="module")
def damaged_clip(ffmpeg: Path, tmp_path_factory) -> Path:
    """An 8-frame 1080p 422 HQ clip of testsrc2 + noise with frames DAMAGED damaged
    (same length, so the container stays valid)."""
    d = tmp_path_factory.mktemp("flag-race")
    clean = d / "clean.mov"
    subprocess.run([str(ffmpeg), "-hide_banner", "-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i",
                    f"testsrc2=s={SIZE}:r=25,noise=alls=30:allf=t,format=yuv422p10le",
                    "-frames:v", str(FRAMES), "-c:v", "prores_ks", "-profile:v", "3", str(clean)],
                   check=True, capture_output=True, timeout=300)
    with demux.open(clean) as src:
        packets = list(src.packets())
    assert len(packets) == FRAMES
    movie = bytearray(clean.read_bytes())
    rng = np.random.default_rng(SEED)
    for n in DAMAGED:
        at = movie.find(packets[n])
        assert at > 0 and movie.find(packets[n], at + 1) < 0
        movie[at:at + len(packets[n])] = damage(packets[n], rng)
    path = d / "damaged.mov"
    path.write_bytes(bytes(movie))
    return path


def decode(ffmpeg: Path, path: Path, threads: int) -> tuple[list[str | None], list[str]]:
    """(the frame named by each "corrupt decoded frame" line, None where the line
    names none; the CRC of each output frame) of one software decode."""
    res = subprocess.run([str(ffmpeg), "-hide_banner", "-nostdin", "-nostats", "-v", "warning",
                          "-threads", str(threads), "-err_detect", ERR_DETECT, "-i", str(path),
                          "-f", "framecrc", "-"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    reported = [m.group(1) for m in map(LINE.search, res.stderr.splitlines()) if m]
    crcs = [line.split(",")[-1].strip() for line in res.stdout.splitlines() if line and line[0] != "#"]
    return reported, crcs


def test_frame_threads_report_the_damaged_frames_of_one_thread(ffmpeg: Path, damaged_clip: Path):
    """Each of RUNS decodes with frame threads reports the same "corrupt decoded
    frame" lines as -threads 1 (one per damaged frame), and outputs every frame."""
    ref_reported, ref_crcs = decode(ffmpeg, damaged_clip, 1)
    assert len(ref_crcs) == FRAMES, "a damaged frame was refused: the clip is damaged too much"
    assert len(ref_reported) == len(DAMAGED), ref_reported
    clean_crcs = [c for n, c in enumerate(ref_crcs) if n not in DAMAGED]
    if all(r is not None for r in ref_reported):      # the message names the frame
        assert ref_reported == [str(n) for n in DAMAGED]
    differing = []
    for run in range(RUNS):
        threads = THREADS[run % len(THREADS)]
        reported, crcs = decode(ffmpeg, damaged_clip, threads)
        # the failed slices of a damaged frame keep whatever the recycled buffer held, which
        # differs from run to run even with -threads 1: only the clean frames are compared
        assert [c for n, c in enumerate(crcs) if n not in DAMAGED] == clean_crcs, \
            f"run {run}, -threads {threads}: clean frames differ from -threads 1"
        if reported != ref_reported:
            differing.append(f"run {run}, -threads {threads}: {reported}")
    assert not differing, (f"{len(differing)} of {RUNS} runs reported other frames than -threads 1 "
                           f"({ref_reported}): " + "; ".join(differing))
