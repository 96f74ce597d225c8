"""Downloads from a discrete GPU, on lavapipe (7.1.5 series patches 16-17, 22-24 and 27, the
9.0.2 backport's 14-15, master series topic 4's threaded, banded downloads).

hwcontext_vulkan downloads from a discrete GPU through its staging buffer, recorded in
bands that threads copy out while the GPU writes the next ones; from lavapipe (a CPU
device) it imports the destination instead, so CI would never run that code. A test-only
layer (tests/tools/vk_fake_discrete.c) reports lavapipe as a discrete GPU: the ProRes
hwaccel's frames downloaded with `-vf hwdownload` must then equal the software decoder's,
frame for frame, odd sizes and 4 planes included, with the 7.1.5 and master builds' downloads really
banded (the layer counts the copies; the 9.0.2 backport has no banded downloads), and the
validation layer silent when asked for. FFmpeg 9.0.2 on
lavapipe copies on the host with VK_EXT_host_image_copy instead: the layer hides that
extension (and VK_EXT_shader_object, which Debian 12's validation layer crashes on), and
the device is opened with avoid_host_import=1, as 9.0.2 does by itself with NVIDIA's driver.
FFmpeg master (build/ffmpeg-master) is run the same way: its host image copies are unusable
with NVIDIA's driver for exportable frames, so there too every download takes the staging path.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from conftest import (FAKE_DISCRETE_LAYER, KNOWN_LAYER_NOISE, NOISE_FFMPEG9, REPO_ROOT, ffmpeg_dir_path,
                      validation_messages, vulkan_env)

# name: size, prores_ks profile, input and output formats, encoder options
CLIPS = {
    "1080p-422hq": ("1920x1080", 3, "yuv422p10le", "yuv422p10le", []),
    "odd-1921x1081-4444-alpha": ("1921x1081", 4, "yuva444p10le", "yuva444p12le",
                                 ["-alpha_bits", "16"]),
    "odd-17x33-4444": ("17x33", 4, "yuv444p10le", "yuv444p12le", []),
}
FRAMES = 2
BUILD_9 = REPO_ROOT / "build" / "ffmpeg-9.0.2"
BUILD_MASTER = REPO_ROOT / "build" / "ffmpeg-master"
def make_clip(ffmpeg: Path, name: str, d: Path) -> Path:
    size, profile, pin, _, extra = CLIPS[name]
    w, h = (int(v) for v in size.split("x"))
    out = d / f"{name}.mov"
    # testsrc2 rounds its size down to even numbers: odd sizes come from scale
    src = f"testsrc2=s={w + w % 2}x{h + h % 2}:r=24:d={FRAMES / 24:.4f},scale={w}:{h}"
    subprocess.run([str(ffmpeg), "-hide_banner", "-nostdin", "-loglevel", "error", "-y",
                    "-f", "lavfi", "-i", src, "-vf", f"noise=alls=14:allf=t+u,format={pin}",
                    "-frames:v", str(FRAMES), "-c:v", "prores_ks", "-profile:v", str(profile),
                    *extra, str(out)], check=True, env={**os.environ, "VK_INSTANCE_LAYERS": ""})
    return out


def hashes(framemd5: str) -> list[str]:
    return [l.rsplit(",", 1)[-1].strip() for l in framemd5.splitlines() if l and not l.startswith("#")]


# 7.1.5: the copies out of the staging buffer use non-temporal stores (patch 30's default),
# or memcpy() with download_nontemporal=0, every size and plane layout here
@pytest.mark.parametrize("build, opts", [pytest.param(None, "", id="7.1.5"),
                                         pytest.param(None, ",download_nontemporal=0", id="7.1.5-memcpy"),
                                         pytest.param(BUILD_9, "", id="9.0.2"),
                                         pytest.param(BUILD_MASTER, "", id="master")])
@pytest.mark.parametrize("cpus", [4, 2])
@pytest.mark.parametrize("name", list(CLIPS))
def test_discrete_gpu_downloads_are_bit_exact(fake_discrete_layer, tmp_path, name, cpus, build, opts):
    ff = build if build is not None else ffmpeg_dir_path()
    if not (ff / "bin" / "ffmpeg").is_file():
        if os.environ.get("CI"):
            pytest.fail(f"no FFmpeg build at {ff}")
        pytest.skip(f"no FFmpeg build at {ff}")
    ffmpeg_bin = ff / "bin" / "ffmpeg"
    nine = build is not None
    clip = make_clip(ffmpeg_bin, name, tmp_path)
    fmt = CLIPS[name][3]
    sw = subprocess.run([str(ffmpeg_bin), "-hide_banner", "-nostdin", "-v", "error", "-i", str(clip),
                         "-f", "framemd5", "-pix_fmt", fmt, "-"], capture_output=True, text=True, check=True)
    stats = tmp_path / "stats.txt"
    env = vulkan_env(validate=True)
    env.update(VK_ADD_LAYER_PATH=str(fake_discrete_layer), VK_INSTANCE_LAYERS=FAKE_DISCRETE_LAYER, FD_STATS=str(stats),
               LD_LIBRARY_PATH=str(ff / "lib"))
    if nine:
        # the layer's SPIR-V parser predates FFmpeg 9's shaders: their validation is off
        env.update(FD_NO_HOST_IMAGE_COPY="1", FD_NO_SHADER_OBJECT="1",
                   VK_LAYER_DISABLES="VK_VALIDATION_FEATURE_DISABLE_SHADERS_EXT")
    device = ("vulkan=vk:0,avoid_host_import=1" if nine else "vulkan=vk:0") + opts
    vk = subprocess.run([str(ffmpeg_bin), "-hide_banner", "-nostdin", "-v", "verbose", "-cpucount", str(cpus),
                         "-init_hw_device", device, "-hwaccel", "vulkan",
                         "-hwaccel_output_format", "vulkan", "-i", str(clip),
                         "-vf", f"hwdownload,format={fmt}", "-f", "framemd5", str(tmp_path / "vk.framemd5")],
                        capture_output=True, text=True, env=env, timeout=600)
    log = vk.stdout + vk.stderr     # the validation layer writes to stdout
    assert vk.returncode == 0, log[-3000:]
    # 7.1.5's hwaccel logs its start; 9.0.2's and master's frames could not be downloaded without it
    assert "(discrete)" in log and (nine or "initialised on" in log), log[-3000:]
    got = hashes((tmp_path / "vk.framemd5").read_text())
    assert got == hashes(sw.stdout) and len(got) == FRAMES
    assert not validation_messages(log, KNOWN_LAYER_NOISE + (NOISE_FFMPEG9 if nine else ()))
    text = stats.read_text()
    banded = int(re.search(r"imageOffset\.y > 0: (\d+)", text).group(1))
    imports = int(re.search(r"GetMemoryHostPointerProperties (\d+)", text).group(1))
    assert imports == 0, text      # the staging path: the destination is not imported
    if name.startswith("odd-17x33") or build == BUILD_9:
        assert banded == 0    # a frame this small is copied out in one piece; the 9.0.2 backport: no bands
    else:
        assert banded > 0, stats.read_text()    # copied out in bands


@pytest.mark.parametrize("opts, bands", [("download_poll_us=0", True), ("download_threads=2", True),
                                         ("download_threads=2,download_poll_us=0", True),
                                         ("download_threads=1", False), ("download_nontemporal=0", True),
                                         ("download_threads=1,download_nontemporal=0", False),
                                         ("download_nontemporal=1", True)])
def test_download_options(fake_discrete_layer, tmp_path, opts, bands):
    """7.1.5 patch 29's device options, with 4 CPUs: the copying threads wait in the kernel at
    once (download_poll_us=0), or fewer of them copy (download_threads=2), still in bands; one
    (download_threads=1) copies each download once it is complete, without bands; patch 30's
    download_nontemporal=0 copies with memcpy() instead of its default non-temporal stores,
    banded or in one piece, and =1 asks for that default explicitly. The frames
    equal the software decoder's either way, and the validation layer stays silent."""
    ff = ffmpeg_dir_path()
    ffmpeg_bin = ff / "bin" / "ffmpeg"
    clip = make_clip(ffmpeg_bin, "1080p-422hq", tmp_path)
    fmt = CLIPS["1080p-422hq"][3]
    sw = subprocess.run([str(ffmpeg_bin), "-hide_banner", "-nostdin", "-v", "error", "-i", str(clip),
                         "-f", "framemd5", "-pix_fmt", fmt, "-"], capture_output=True, text=True, check=True)
    stats = tmp_path / "stats.txt"
    env = vulkan_env(validate=True)
    env.update(VK_ADD_LAYER_PATH=str(fake_discrete_layer), VK_INSTANCE_LAYERS=FAKE_DISCRETE_LAYER,
               FD_STATS=str(stats), LD_LIBRARY_PATH=str(ff / "lib"))
    vk = subprocess.run([str(ffmpeg_bin), "-hide_banner", "-nostdin", "-v", "verbose", "-cpucount", "4",
                         "-init_hw_device", f"vulkan=vk:0,{opts}", "-hwaccel", "vulkan",
                         "-hwaccel_output_format", "vulkan", "-i", str(clip),
                         "-vf", f"hwdownload,format={fmt}", "-f", "framemd5", str(tmp_path / "vk.framemd5")],
                        capture_output=True, text=True, env=env, timeout=600)
    log = vk.stdout + vk.stderr
    assert vk.returncode == 0, log[-3000:]
    assert "(discrete)" in log and "initialised on" in log, log[-3000:]
    got = hashes((tmp_path / "vk.framemd5").read_text())
    assert got == hashes(sw.stdout) and len(got) == FRAMES
    assert not validation_messages(log, KNOWN_LAYER_NOISE)
    banded = int(re.search(r"imageOffset\.y > 0: (\d+)", stats.read_text()).group(1))
    assert (banded > 0) == bands, stats.read_text()


@pytest.mark.parametrize("build", [pytest.param(BUILD_9, id="9.0.2"), pytest.param(BUILD_MASTER, id="master")])
@pytest.mark.parametrize("fmt", ["yuv422p10le", "yuva444p12le"])
def test_round_trips_share_the_staging_pool(fake_discrete_layer, tmp_path, fmt, build):
    """FFmpeg 9.0.2 and master take upload and download staging buffers from one pool (9.0.2
    series patch 15, master 0021): with both directions through it, an hwupload/hwdownload
    round trip gives back the frames it was given, and no buffer is used for a copy its usage
    does not allow (VUID-vkCmdCopyImageToBuffer-dstBuffer-00191,
    -vkCmdCopyBufferToImage-srcBuffer-00174)."""
    ff = build
    if not (ff / "bin" / "ffmpeg").is_file():
        if os.environ.get("CI"):
            pytest.fail(f"no FFmpeg build at {ff}")
        pytest.skip(f"no FFmpeg build at {ff}")
    ffmpeg = str(ff / "bin" / "ffmpeg")
    src = "testsrc2=s=1920x1080:r=24:d=0.25,noise=alls=20:allf=t"
    ref = subprocess.run([ffmpeg, "-hide_banner", "-nostdin", "-v", "error", "-f", "lavfi", "-i", src,
                          "-vf", f"format={fmt}", "-f", "framemd5", "-"], capture_output=True, text=True,
                         check=True, env={**os.environ, "VK_INSTANCE_LAYERS": ""})
    env = vulkan_env(validate=True)
    env.update(VK_ADD_LAYER_PATH=str(fake_discrete_layer), VK_INSTANCE_LAYERS=FAKE_DISCRETE_LAYER, LD_LIBRARY_PATH=str(ff / "lib"),
               FD_NO_HOST_IMAGE_COPY="1", FD_NO_SHADER_OBJECT="1", FD_NO_HOST_MEMORY="1",
               VK_LAYER_DISABLES="VK_VALIDATION_FEATURE_DISABLE_SHADERS_EXT")
    out = tmp_path / "rt.framemd5"
    res = subprocess.run([ffmpeg, "-hide_banner", "-nostdin", "-v", "verbose",
                          "-init_hw_device", "vulkan=vk:0,avoid_host_import=1", "-filter_hw_device", "vk",
                          "-f", "lavfi", "-i", src, "-vf", f"format={fmt},hwupload,hwdownload,format={fmt}",
                          "-f", "framemd5", str(out)], capture_output=True, text=True, env=env, timeout=600)
    log = res.stdout + res.stderr
    assert res.returncode == 0, log[-3000:]
    assert hashes(out.read_text()) == hashes(ref.stdout) and len(hashes(ref.stdout)) == 6
    assert not validation_messages(log, KNOWN_LAYER_NOISE + NOISE_FFMPEG9)
