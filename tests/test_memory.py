"""Memory stays flat when pyprores.decode.native decoders and sessions are closed and
opened again (a format change, ppr_stream_reset, a new session per file).

Each case runs tests/tools/rss_reopen.py in a child process and bounds the
growth of its RSS after a warm-up. Up to series patch 19 as first written,
every Vulkan decoder closed with error detection on (as pyprores decodes)
stayed in memory: the frames its execution contexts held kept the slice
report, and through it the decoder's shared context, alive. That was about
2.7 MB per reopen and 14 MB per session on lavapipe (the whole Vulkan device
went with it), far above these bounds; with the fix, and with FFmpeg 9.0.2,
30 reopens grow by well under 1 MB and sessions by what lavapipe caches.

The children run without the validation layer: its own bookkeeping is not
what is measured, and its GPU-assisted validation (Debian 12's 1.3.239) waits
10 s for every frame semaphore when a decoder's frames are freed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pyprores.decode import native

REPO = Path(__file__).resolve().parent.parent
TOOL = REPO / "tests" / "tools" / "rss_reopen.py"

HAS_VK = native.available() and native.has_hwaccel("vulkan")
NO_VK = "this FFmpeg build has no prores_vulkan hwaccel"

# mode, warm-up rounds, measured rounds, bound on the growth in KiB. Measured on
# lavapipe (2026-11-26): reopen (2 reopens a round) 0.3 MB fixed, 80 MB before;
# stream 0.2 MB, 42 MB before; prefetch (packets prepared ahead, a size change
# among them, an early exit with some pending) -2.2 MB, flat; session 10 MB (as
# on FFmpeg 9.0.2), 118 MB before; file (the C reader, left early and to the end) flat.
CASES = [
    ("reopen", 3, 15, 16 * 1024),
    ("stream", 3, 15, 16 * 1024),
    ("prefetch", 3, 15, 16 * 1024),
    ("file", 3, 15, 16 * 1024),
    ("session", 5, 8, 48 * 1024),
]


@pytest.fixture(scope="module")
def two_sizes(tmp_path_factory, ffmpeg_bin) -> tuple[Path, Path]:
    """Two tiny 4:2:2 HQ clips of different sizes: 3 frames of 64x48, 1 of 80x64."""
    out = tmp_path_factory.mktemp("rss")
    paths = []
    for name, size, dur in (("small", "64x48", "0.12"), ("large", "80x64", "0.04")):
        path = out / f"{name}.mov"
        subprocess.run([str(ffmpeg_bin), "-hide_banner", "-v", "error", "-y", "-f", "lavfi",
                        "-i", f"testsrc2=s={size}:r=25:d={dur}", "-c:v", "prores_ks",
                        "-profile:v", "3", str(path)], check=True, capture_output=True)
        paths.append(path)
    return paths[0], paths[1]


def rss_run(mode: str, backend: str, warmup: int, rounds: int, clips: tuple[Path, Path]) -> dict:
    env = dict(os.environ, PYPRORES_VALIDATION="0")
    res = subprocess.run([sys.executable, str(TOOL), mode, backend, str(warmup), str(rounds),
                          str(clips[0]), str(clips[1])], capture_output=True, text=True,
                         cwd=str(REPO), env=env, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not HAS_VK, reason=NO_VK)
@pytest.mark.parametrize("mode,warmup,rounds,bound", CASES, ids=[c[0] for c in CASES])
def test_vulkan_reopen_memory_is_flat(two_sizes, mode, warmup, rounds, bound):
    r = rss_run(mode, "vulkan", warmup, rounds, two_sizes)
    assert r["growth_kib"] < bound, (
        f"{mode}: RSS grew {r['growth_kib']} KiB over {rounds} rounds (bound {bound} KiB, "
        f"{r['ffmpeg']}): {r['samples_kib']}")


def test_software_reopen_memory_is_flat(two_sizes):
    r = rss_run("reopen", "software", 3, 15, two_sizes)
    assert r["growth_kib"] < 4 * 1024, r
