"""The user build (scripts/setup --user, issue 32): real files in, delivery formats out, on the GPU.

With build/ffmpeg-user (skipped without it: CI builds the minimal configuration only):
  - FFmpeg's MXF (Apple ProRes Proxy HDR10, two PCM tracks) and bzip2-compressed Matroska
    samples of ../shared/samples decode with -hwaccel vulkan to the software decoder's frames;
  - the MXF sample, decoded on the GPU, is transcoded into each delivery format (H.264, HEVC,
    AV1, VP9 with AAC or Opus; DNxHR HQX in MXF; ProRes Proxy; FFV1; 16-bit PNG, TIFF and DPX
    sequences): the output has the codec and the frame count asked for, and where the
    encoder is deterministic its bytes equal those of the same job with software decoding;
  - tools/gpu/workflow --quick: every GPU-decoded output equal to the software-decoded one.
On lavapipe: about 40 s.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT

SAMPLES = REPO_ROOT.parent / "shared" / "samples"
MXF = SAMPLES / "fate_Meridian-Apple_ProResProxy-HDR10.mxf"
MKV_BZ2 = SAMPLES / "fate_prores_bz2.mkv"
HW = ["-init_hw_device", "vulkan=vk:0", "-hwaccel", "vulkan", "-hwaccel_output_format", "vulkan"]


@pytest.fixture(scope="module")
def user_dir() -> Path:
    d = REPO_ROOT / "build" / "ffmpeg-user"
    if not (d / "bin" / "ffmpeg").is_file():
        pytest.skip("no build/ffmpeg-user (scripts/setup --user)")
    return d


def ff(user_dir: Path, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    res = subprocess.run([str(user_dir / "bin" / "ffmpeg"), "-hide_banner", "-nostdin", "-y", *map(str, args)],
                         capture_output=True, text=True, timeout=timeout)
    if check and res.returncode:
        raise AssertionError(f"ffmpeg {' '.join(map(str, args))} exited {res.returncode}:\n{res.stderr[-3000:]}")
    return res


def sample(path: Path) -> Path:
    if not path.is_file():
        pytest.skip(f"{path} is not here")
    return path


@pytest.mark.parametrize("clip, fmt, frames", [(MXF, "yuv422p10le", 5), (MKV_BZ2, "yuv422p10le", 2)],
                         ids=["mxf", "mkv-bz2"])
def test_sample_decodes_on_the_gpu_like_software(user_dir, clip, fmt, frames):
    clip = sample(clip)
    sw = ff(user_dir, "-v", "error", "-i", clip, "-map", "0:v:0", "-f", "framemd5", "-pix_fmt", fmt, "-").stdout
    hw = ff(user_dir, "-v", "verbose", *HW, "-i", clip, "-map", "0:v:0", "-vf", f"hwdownload,format={fmt}",
            "-f", "framemd5", "-")
    assert "ProRes Vulkan decoder initialised on" in hw.stderr, hw.stderr[-2000:]
    rows = [line for line in sw.splitlines() if line and not line.startswith("#")]
    assert len(rows) == frames
    assert hw.stdout == sw


# name, output, filters after the download, encoder/muxer arguments, video codec, deterministic
DELIVERIES = [
    ("h264", "out.mp4", "scale=640:-2,format=yuv420p",
     ["-c:v", "libx264", "-preset", "ultrafast", "-c:a", "aac"], "h264", True),
    ("hevc", "out.mp4", "scale=640:-2,format=yuv420p10le",
     ["-c:v", "libx265", "-preset", "ultrafast", "-x265-params", "log-level=error", "-tag:v", "hvc1", "-c:a", "aac"],
     "hevc", False),
    ("av1", "out.webm", "scale=640:-2,format=yuv420p10le",
     ["-c:v", "libsvtav1", "-preset", "12", "-c:a", "libopus"], "av1", False),
    ("vp9", "out.webm", "scale=640:-2,format=yuv420p",
     ["-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-c:a", "libopus"], "vp9", False),
    ("dnxhr", "out.mxf", "format=yuv422p10le",
     ["-c:v", "dnxhd", "-profile:v", "dnxhr_hqx", "-c:a", "pcm_s24le"], "dnxhd", True),
    ("proxy", "out.mov", "scale=640:-2", ["-c:v", "prores_ks", "-profile:v", "0", "-c:a", "pcm_s16le"], "prores", True),
    ("ffv1", "out.mkv", "null", ["-c:v", "ffv1", "-level", "3", "-c:a", "pcm_s24le"], "ffv1", True),
    ("png", "%03d.png", "format=rgb48be", ["-c:v", "png", "-an"], "png", True),
    ("tiff", "%03d.tif", "format=rgb48le", ["-c:v", "tiff", "-an"], "tiff", True),
    ("dpx", "%03d.dpx", "format=rgb48le", ["-c:v", "dpx", "-an"], "dpx", True),
]


def digest(directory: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(directory.iterdir()):
        h.update(p.name.encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


@pytest.mark.parametrize("name, out, filters, args, codec, deterministic", DELIVERIES, ids=[d[0] for d in DELIVERIES])
def test_mxf_to_delivery_format(user_dir, tmp_path, name, out, filters, args, codec, deterministic):
    clip = sample(MXF)
    dirs = {}
    for mode in ("vk", "sw") if deterministic else ("vk",):
        d = tmp_path / mode
        d.mkdir()
        pre = HW if mode == "vk" else []
        vf = f"hwdownload,format=yuv422p10le,{filters}" if mode == "vk" else filters
        maps = ["-map", "0:v:0"] + ([] if "-an" in args else ["-map", "0:a:0"])
        ff(user_dir, "-v", "error", *pre, "-i", clip, *maps, "-vf", vf, *args, "-fflags", "+bitexact", d / out)
        dirs[mode] = d
    first = sorted(dirs["vk"].iterdir())[0]
    probe = subprocess.run([str(user_dir / "bin" / "ffprobe"), "-v", "error", "-count_packets", "-show_entries",
                            "stream=codec_type,codec_name,nb_read_packets", "-of", "json", str(first)],
                           capture_output=True, text=True, check=True)
    streams = json.loads(probe.stdout)["streams"]
    video = [s for s in streams if s["codec_type"] == "video"]
    assert video and video[0]["codec_name"] == codec, streams
    if "%" in out:
        assert len(list(dirs["vk"].iterdir())) == 5
    else:
        assert int(video[0]["nb_read_packets"]) == 5
        assert [s for s in streams if s["codec_type"] == "audio"], "the PCM track was not carried over"
    if deterministic:
        assert digest(dirs["vk"]) == digest(dirs["sw"]), f"{name}: GPU-decoded output differs from software-decoded"


def test_workflow_quick(user_dir, tmp_path):
    """tools/gpu/workflow's jobs on tiny sources: runs, and GPU decoding changes no output byte."""
    out = tmp_path / "workflow.json"
    res = subprocess.run([sys.executable, str(REPO_ROOT / "tools" / "gpu" / "workflow"), "--ffmpeg", f"ours={user_dir}",
                          "--quick", "--modes", "sw,vk", "--jobs", "h264,proxy,dnxhr,tiff", "--workdir", str(tmp_path / "w"),
                          "--json", str(out), "--markdown", str(tmp_path / "workflow.md")],
                         capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": ""})
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    runs = json.loads(out.read_text())["runs"]
    vk = [r for r in runs if r["mode"] == "vk"]
    assert len(vk) == 8 and all(r["identical"] for r in vk), [r for r in vk if not r["identical"]]
    assert all(r["wall_s"] > 0 and r["cpu_s"] > 0 and r["sha256"] for r in runs)
    # the summary (gpu-run keeps the "workflow |" lines) and its Markdown: a row per source and job
    table = [l for l in res.stdout.splitlines() if l.startswith("workflow | ")]
    assert len(table) == 1 + 8 and all(l.endswith(("| yes " + r["sha256"][:12])) for l, r in
                                         zip(table[1:], [r for r in runs if r["mode"] == "vk"]))
    md = (tmp_path / "workflow.md").read_text().splitlines()
    assert len(md) == 2 + 8 and md[1].startswith("|---|")
