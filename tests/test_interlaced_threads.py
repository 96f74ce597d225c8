"""Regression test for the interlaced frame-thread hang of FFmpeg 9.0.2's prores_vulkan
(9.0.2 series, patch 7): with FFmpeg's default frame threads, 1080i stopped decoding
on an NVIDIA H100 (no frame in 30 s) while 1080p decoded.

It needs a real GPU: lavapipe (one queue, CPU execution) never showed the hang, so on
it the test cannot fail and is not run by default (`-m gpu`, on the GPU machine:
`./scripts/test -m gpu tests/test_interlaced_threads.py`). The build is
build/ffmpeg-9.0.2 (PYPRORES_TEST_BUILD=NAME for another), the device
$PYPRORES_VK_DEVICE (default 0); PYPRORES_HANG_SIZE, _FRAMES and _PASSES shrink it for a
quick check of the test itself on lavapipe.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from pyprores import builds

pytestmark = pytest.mark.gpu

BUILD = os.environ.get("PYPRORES_TEST_BUILD", "9.0.2")
DEVICE = os.environ.get("PYPRORES_VK_DEVICE", "0")
FRAMES = int(os.environ.get("PYPRORES_HANG_FRAMES", 48))
PASSES = int(os.environ.get("PYPRORES_HANG_PASSES", 10))


@pytest.fixture(scope="module")
def ffmpeg() -> Path:
    exe = builds.ffmpeg_dir(BUILD) / "bin" / "ffmpeg"
    if not exe.exists():
        pytest.fail(f"no {exe}: ./scripts/setup --series {BUILD}")
    return exe


@pytest.fixture(scope="module")
def clips(ffmpeg: Path, tmp_path_factory) -> dict[str, Path]:
    out = {}
    for name, extra in (("1080i", ["-flags", "+ildct", "-field_order", "tt"]), ("1080p", [])):
        path = tmp_path_factory.mktemp("clips") / f"{name}.mov"
        vf = "noise=alls=14:allf=t+u,format=yuv422p10le" + (",setfield=tff" if extra else "")
        subprocess.run([str(ffmpeg), "-hide_banner", "-nostdin", "-v", "error", "-f", "lavfi", "-i",
                        f"testsrc2=s={os.environ.get('PYPRORES_HANG_SIZE', '1920x1080')}:r=25", "-vf", vf, "-frames:v", str(FRAMES),
                        "-c:v", "prores_ks", "-profile:v", "hq", *extra, str(path)],
                       check=True, timeout=300)
        out[name] = path
    return out


@pytest.mark.parametrize("threads", [0, 4, 17, 32])
@pytest.mark.parametrize("clip", ["1080i", "1080p"])
def test_decodes_with_frame_threads(ffmpeg: Path, clips: dict[str, Path], clip: str, threads: int):
    """Every frame comes out within 30 s (a healthy run takes 1-2 s on the H100)."""
    try:
        res = subprocess.run([str(ffmpeg), "-hide_banner", "-nostdin", "-v", "error",
                              "-init_hw_device", f"vulkan=vk:{DEVICE}", "-threads", str(threads),
                              "-hwaccel", "vulkan", "-hwaccel_output_format", "vulkan",
                              "-stream_loop", str(PASSES - 1), "-i", str(clips[clip]),
                              "-vf", "hwdownload,format=yuv422p10le", "-f", "framecrc", "-"], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{clip} with -threads {threads}: no end within 30 s (the frame-thread hang)")
    assert res.returncode == 0, res.stderr[-2000:]
    frames = [line for line in res.stdout.splitlines() if line and not line.startswith("#")]
    assert len(frames) == FRAMES * PASSES
