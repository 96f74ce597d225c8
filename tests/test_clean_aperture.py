"""The container's clean aperture on GPU-resident frames (issue 32; 7.1.5 patches 26-28,
the master series' topic 6-crop).

A QuickTime `clap` atom becomes the stream's cropping (AV_PKT_DATA_FRAME_CROPPING), which
ffmpeg applies by inserting a crop filter at the head of the filter graph. On Vulkan frames
that filter only sets the frames' cropping fields, which hwdownload ignores: stock FFmpeg
gives 1920x1080 where software gives 1888x1062. With the series ffmpeg inserts crop_vulkan
for Vulkan frames, which copies the rectangle into frames of its size. Checked here:

    ffmpeg -i CLIP -f framemd5 -pix_fmt FMT -                                   (software)
    ffmpeg -hwaccel vulkan -hwaccel_output_format vulkan -i CLIP
           -vf hwdownload,format=FMT -f framemd5 -                              (GPU frames)

give the same size and the same pixels, on Apple's 4444 sample (crop 16/16/9/9) and on a
4:2:2 clip given a clap with odd offsets (left 3, right 5, top 1, bottom 2: the left edge is
rounded down to the chroma grid as the crop filter does). Also under the validation layer,
and crop_vulkan's own options. Runs on lavapipe; one 1920x1080 frame is the largest.
tests/test_builds.py runs this file on the master build too (PYPRORES_BUILD=master).
"""

from __future__ import annotations

import re
import struct
import subprocess
from pathlib import Path

import pytest

from conftest import (FAKE_DISCRETE_LAYER, KNOWN_LAYER_NOISE, NOISE_FFMPEG9, REPO_ROOT, validation_errors,
                      validation_requested, vulkan_env)
from pyprores.corpus.clips import Recipe

APPLE_4444 = REPO_ROOT.parent / "shared" / "samples" / "fate_prores4444_with_transparency.mov"
HW_GPU = ["-init_hw_device", "vulkan=vk:0", "-hwaccel", "vulkan", "-hwaccel_output_format", "vulkan"]
CONTAINERS = (b"moov", b"trak", b"mdia", b"minf", b"stbl")
HWACCEL_STARTED = ("ProRes Vulkan decoder initialised on", "Vulkan decoder initialization successful")


# ---------------------------------------------------------------------------- a clap atom

def _boxes(buf: bytes, start: int, end: int):
    """(offset, size, type) of each box in buf[start:end] (32-bit sizes only)."""
    pos = start
    while pos + 8 <= end:
        size, kind = struct.unpack(">I4s", buf[pos:pos + 8])
        if size < 8 or pos + size > end:
            raise ValueError(f"bad box {kind!r} at {pos}")
        yield pos, size, kind
        pos += size


def add_clap(src: Path, dst: Path, width: int, height: int,
             left: int, right: int, top: int, bottom: int) -> None:
    """Copy a QuickTime file written by FFmpeg (moov after mdat, one video track first),
    adding to its first sample entry the clap atom that FFmpeg's demuxer reads as the
    given crop: aperture (w - l - r) x (h - t - b), offsets ((l - r) / 2, (t - b) / 2)."""
    buf = bytearray(src.read_bytes())
    path = []                       # offsets of the boxes that contain the new atom
    start, end = 0, len(buf)
    for kind in CONTAINERS + (b"stsd",):
        hit = next(((o, s) for o, s, k in _boxes(buf, start, end) if k == kind), None)
        if hit is None:
            raise ValueError(f"{src}: no {kind!r} box")
        path.append(hit[0])
        start, end = hit[0] + 8, hit[0] + hit[1]
        if kind == b"moov":
            mdat = [o for o, _, k in _boxes(buf, 0, len(buf)) if k == b"mdat"]
            assert mdat and mdat[0] < hit[0], "moov must follow mdat (chunk offsets are not rewritten)"
    entry = path[-1] + 16           # stsd: header, version/flags, entry count
    entry_size = struct.unpack(">I", buf[entry:entry + 4])[0]
    clap = struct.pack(">I4s8i", 40, b"clap", width - left - right, 1, height - top - bottom, 1,
                       left - right, 2, top - bottom, 2)
    insert_at = entry + entry_size
    buf[insert_at:insert_at] = clap
    for off in path + [entry]:
        size = struct.unpack(">I", buf[off:off + 4])[0]
        buf[off:off + 4] = struct.pack(">I", size + len(clap))
    dst.write_bytes(bytes(buf))


# ---------------------------------------------------------------------------- helpers

def framemd5(res) -> tuple[str, list[str]]:
    """(the dimensions line, the md5 of each frame) of framemd5 output."""
    dims = re.search(r"^#dimensions 0: (\d+x\d+)$", res.stdout, re.M)
    assert dims, res.stdout[:2000]
    rows = [line.split(",")[-1].strip() for line in res.stdout.splitlines()
            if line and not line.startswith("#")]
    return dims.group(1), rows


def software(run_ffmpeg, clip: Path, fmt: str) -> tuple[str, list[str]]:
    return framemd5(run_ffmpeg("-hide_banner", "-nostdin", "-v", "error", "-i", clip, "-map", "0:v:0",
                               "-f", "framemd5", "-pix_fmt", fmt, "-", timeout=120))


def gpu_frames(run_ffmpeg, clip: Path, fmt: str, validate: bool = False, *extra: str, **kwargs):
    res = run_ffmpeg("-hide_banner", "-nostdin", "-v", "verbose", *HW_GPU, *extra, "-i", clip,
                     "-map", "0:v:0", "-vf", f"hwdownload,format={fmt}", "-f", "framemd5", "-",
                     validate=validate, timeout=180, **kwargs)
    # the hwaccel ran: our 7.1.5 decoder's start line, or FFmpeg 9's / master's
    assert any(m in res.stderr for m in HWACCEL_STARTED), res.stderr[-3000:]
    return res


@pytest.fixture(scope="module")
def clap_422(ffmpeg_bin, tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("clap")
    plain = Recipe(name="clap-hq", profile="hq", content="camera", width=128, height=72,
                   frames=2).encode(ffmpeg_bin, d)
    out = d / "clap-422.mov"
    add_clap(plain, out, 128, 72, left=3, right=5, top=1, bottom=2)
    return out


def clips(clap_422: Path) -> dict[str, tuple[Path, str, str]]:
    """name -> (clip, FMT, the size the crop filter gives)."""
    out = {"422-odd": (clap_422, "yuv422p10le", "120x69")}
    if APPLE_4444.is_file():
        out["apple-4444"] = (APPLE_4444, "yuva444p12le", "1888x1062")
    return out


# ---------------------------------------------------------------------------- tests

def test_demuxer_reads_the_added_clap(clap_422, run_ffprobe):
    """The synthetic clip carries the crop it was given (else the tests below prove nothing)."""
    res = run_ffprobe("-v", "error", "-select_streams", "v:0", "-show_entries",
                      "stream_side_data", "-of", "default=nw=1", clap_422)
    got = dict(re.findall(r"^crop_(top|bottom|left|right)=(\d+)$", res.stdout, re.M))
    assert got == {"top": "1", "bottom": "2", "left": "3", "right": "5"}, res.stdout


@pytest.mark.parametrize("name", ["422-odd", "apple-4444"])
def test_gpu_frames_are_cropped_like_software(clap_422, run_ffmpeg, name):
    table = clips(clap_422)
    if name not in table:
        pytest.skip(f"{APPLE_4444} is not here")
    clip, fmt, size = table[name]
    sw = software(run_ffmpeg, clip, fmt)
    assert sw[0] == size, f"software gave {sw[0]}, the crop filter's rectangle is {size}"
    res = gpu_frames(run_ffmpeg, clip, fmt)
    assert framemd5(res) == sw
    assert "[crop_vulkan @" in res.stderr, "ffmpeg did not insert crop_vulkan:\n" + res.stderr[-3000:]


def test_apply_cropping_none_keeps_the_full_frame(clap_422, run_ffmpeg):
    """-apply_cropping none: no crop on either path, the full coded picture."""
    sw = framemd5(run_ffmpeg("-hide_banner", "-nostdin", "-v", "error", "-apply_cropping", "none",
                             "-i", clap_422, "-f", "framemd5", "-pix_fmt", "yuv422p10le", "-"))
    assert sw[0] == "128x72"
    res = gpu_frames(run_ffmpeg, clap_422, "yuv422p10le", False, "-apply_cropping", "none")
    assert "crop_vulkan" not in res.stderr
    assert framemd5(res) == sw


def test_crop_vulkan_under_validation(clap_422, run_ffmpeg, ffmpeg_bin, request):
    """No validation error with crop_vulkan in the graph. FFmpeg 9 and master (not 7.1.5)
    crash Debian 12's validation layer through VK_EXT_shader_object and use the host-transfer
    usage it does not know: they are run through the fake-discrete layer with both hidden,
    their own known messages ignored (conftest.NOISE_FFMPEG9)."""
    if not validation_requested():
        pytest.skip("PYPRORES_VALIDATION=1 not set (./scripts/test sets it)")
    version = subprocess.run([str(ffmpeg_bin), "-hide_banner", "-version"], capture_output=True,
                             text=True, check=True).stdout.split()[2]
    if version.startswith("7."):
        res = gpu_frames(run_ffmpeg, clap_422, "yuv422p10le", True)
        errors = validation_errors(res.stderr)
    else:
        env = vulkan_env(validate=True)
        env.update(VK_ADD_LAYER_PATH=str(request.getfixturevalue("fake_discrete_layer")),
                   VK_INSTANCE_LAYERS=FAKE_DISCRETE_LAYER, FD_NO_HOST_IMAGE_COPY="1",
                   FD_NO_SHADER_OBJECT="1", VK_LAYER_DISABLES="VK_VALIDATION_FEATURE_DISABLE_SHADERS_EXT")
        res = gpu_frames(run_ffmpeg, clap_422, "yuv422p10le", False, env=env)
        errors = validation_errors(res.stdout + res.stderr, KNOWN_LAYER_NOISE + NOISE_FFMPEG9)
    assert "[crop_vulkan @" in res.stderr
    assert not errors, "\n".join(errors[:20])


@pytest.mark.parametrize("opts, size, ok", [
    ("w=64:h=32:x=10:y=7", "64x32", True),       # x rounded down to 10 (even already)
    ("w=63:h=31:x=11:y=7", "62x31", True),       # w and x rounded down to the 4:2:2 grid
    ("x=100:y=60", "28x12", True),               # w/h default: the rest of the picture
    ("w=63:h=31:x=11:y=7:exact=1", None, False),  # an exact crop must fit the chroma grid
    ("w=200:h=10", None, False),                 # larger than the input
])
def test_crop_vulkan_filter_matches_crop(ffmpeg_bin, run_ffmpeg, tmp_path, opts, size, ok):
    """crop_vulkan on hwupload'ed frames against crop on the same software frames."""
    src = ["-hide_banner", "-nostdin", "-v", "error", "-init_hw_device", "vulkan=vk:0",
           "-filter_hw_device", "vk", "-f", "lavfi", "-i", "testsrc2=s=128x72:d=0.08,format=yuv422p10le"]
    res = run_ffmpeg(*src, "-vf", f"hwupload,crop_vulkan={opts},hwdownload,format=yuv422p10le",
                     "-f", "framemd5", "-", check=False)
    if not ok:
        assert res.returncode != 0
        return
    assert res.returncode == 0, res.stderr[-2000:]
    crop_opts = "w=iw-100:h=ih-60:x=100:y=60" if opts == "x=100:y=60" else opts
    sw = framemd5(run_ffmpeg(*src, "-vf", f"crop={crop_opts}", "-f", "framemd5", "-"))
    assert sw[0] == size
    assert framemd5(res) == sw
