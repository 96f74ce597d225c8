"""Frames larger than the Vulkan device's images (ROBUSTNESS.md finding 11).

A ProRes header may claim up to 65535 x 65535; FFmpeg 9.0.2's and master's
hwcontext_vulkan created a test image of whatever size the decoder's frames
context had, calling vkCreateImage() beyond the device's maxImageDimension2D
(VUID-VkImageCreateInfo-extent-02252: fuzzed headers on an NVIDIA H200). Master
0028 and 9.0.2 patch 16 refuse such a frames context first, with an error that
names the limit. lavapipe's limit is 16384: a header of 20000 x 64 (a frame the
software decoder can allocate) must be refused there by hwcontext_vulkan, not by
the driver.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from conftest import REPO_ROOT, prores_mov_claiming, vulkan_env

BUILDS = {"9.0.2": REPO_ROOT / "build" / "ffmpeg-9.0.2", "master": REPO_ROOT / "build" / "ffmpeg-master"}
REFUSAL = "exceed the device's largest image dimension"


@pytest.mark.parametrize("name", list(BUILDS))
def test_frames_beyond_the_device_limit_are_refused_by_hwcontext(tmp_path: Path, ffmpeg_bin: Path, name: str):
    ff = BUILDS[name]
    if not (ff / "bin" / "ffmpeg").is_file():
        if os.environ.get("CI"):
            pytest.fail(f"no FFmpeg build at {ff}")
        pytest.skip(f"no FFmpeg build at {ff}")
    wide = prores_mov_claiming(ffmpeg_bin, tmp_path, 20000, 64)
    env = vulkan_env()
    env["LD_LIBRARY_PATH"] = str(ff / "lib")
    res = subprocess.run([str(ff / "bin" / "ffmpeg"), "-hide_banner", "-v", "error",
                          "-init_hw_device", "vulkan=vk:0", "-hwaccel", "vulkan",
                          "-hwaccel_output_format", "vulkan", "-i", str(wide), "-f", "null", "-"],
                         capture_output=True, text=True, timeout=120, env=env)
    assert REFUSAL in res.stderr, res.stderr[-2000:]
    assert "20000x64" in res.stderr.split(REFUSAL)[0].splitlines()[-1]
