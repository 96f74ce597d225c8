"""The ProRes Vulkan hwaccel through the ffmpeg binary of the build (issue 4).

For every variant (profiles, 12-bit 4:4:4, alpha 8/16, TFF/BFF, custom quant
matrix, 1/2/4/8 macroblocks per slice, odd sizes, prores_aw) a clip of one or
two frames is encoded at test time and the per-frame framemd5 of

    ffmpeg -i CLIP -f framemd5 -pix_fmt FMT -                              (software)
    ffmpeg -init_hw_device vulkan=vk:0 -hwaccel vulkan -hwaccel_output_format vulkan
           -i CLIP -vf hwdownload,format=FMT -f framemd5 -                 (Vulkan)

must be equal, FMT being the decoder's format as ffprobe reports it. The Vulkan
run is verbose, and must show that the hwaccel ran (its "initialised on" line)
and that frames reached the filter graph as Vulkan frames: no silent fallback.
Also: the automatic download path, -threads 4, the validation layer
(GPU-resident decoding, known layer noise filtered: tests/conftest.py), and the
pyprores.decode.native Vulkan session against the software one.

Runs on lavapipe in CI; clips are tiny (the largest is one 1918x1078 frame).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import (FAKE_DISCRETE_LAYER, KNOWN_LAYER_NOISE, REPO_ROOT, validation_messages, validation_requested,
                      vulkan_env)
from pyprores.corpus.clips import Recipe
from pyprores.corpus import parse_framemd5

INIT_LINE = "ProRes Vulkan decoder initialised on"
HW = ["-init_hw_device", "vulkan=vk:0", "-hwaccel", "vulkan"]
HW_GPU = HW + ["-hwaccel_output_format", "vulkan"]


def R(name: str, **kw) -> Recipe:
    kw.setdefault("content", "camera")
    return Recipe(name=name, **kw)


# name -> recipe; sizes are not multiples of 16 unless the variant is about size
VARIANTS = {r.name: r for r in [
    R("proxy", profile="proxy", width=96, height=56),
    R("lt", profile="lt", width=128, height=72),
    R("standard", profile="standard", width=120, height=66),
    R("hq", profile="hq", width=176, height=100),
    R("4444", profile="4444", width=120, height=66),
    R("4444xq", profile="4444xq", width=144, height=82),
    R("alpha8", profile="4444", alpha_bits=8, width=120, height=66),
    R("alpha16", profile="4444xq", alpha_bits=16, width=120, height=66),
    R("tff", profile="hq", scan="tff", width=176, height=100),
    R("bff", profile="hq", scan="bff", width=176, height=100),
    R("bff-4444-alpha16", profile="4444", alpha_bits=16, scan="bff", width=104, height=70),
    R("quant-mat", profile="hq", quant_mat="proxy", width=128, height=72),
    R("q1-noise", profile="hq", quant="q1", content="noise", width=64, height=48),
    # 232 = 14.5 MBs: with 8 MBs per slice one row has slices of 8, 4, 2 and 1
    R("mbs1", profile="hq", mbs_per_slice=1, width=232, height=40),
    R("mbs2", profile="hq", mbs_per_slice=2, width=232, height=40),
    R("mbs4", profile="hq", mbs_per_slice=4, width=232, height=40),
    R("mbs8", profile="hq", mbs_per_slice=8, width=232, height=40),
    R("16x16", profile="hq", width=16, height=16),
    R("50x34", profile="hq", width=50, height=34),
    R("1918x1078", profile="hq", width=1918, height=1078, frames=1),
    R("aw-hq", encoder="prores_aw", profile="hq", width=120, height=66),
    R("aw-4444-alpha16-tff", encoder="prores_aw", profile="4444", alpha_bits=16, scan="tff",
      width=120, height=66),
]}
NAMES = list(VARIANTS)

# GPU-resident decodes under the validation layer (one-frame clips: Debian 12's layer
# stalls 10 s per plane and frame when a pool frame is freed, see conftest.py; these
# run in the background while the other tests run).
VALIDATED = ["hq", "4444xq", "alpha8", "bff-4444-alpha16", "tff", "mbs1", "50x34",
             "aw-4444-alpha16-tff"]
# the automatic download path (no -hwaccel_output_format), and -threads 4
AUTO_DOWNLOAD = ["hq", "4444xq", "alpha16", "bff", "mbs2", "aw-hq"]
THREADED = ["hq", "alpha16", "tff", "mbs1"]


# ---------------------------------------------------------------------------- fixtures

@pytest.fixture(scope="session")
def hw_clips(tmp_path_factory, ffmpeg_bin, ffprobe_bin) -> dict[str, tuple[Path, str]]:
    """name -> (clip, FMT): every variant, encoded once per session."""
    d = tmp_path_factory.mktemp("hwaccel-clips")
    out = {}
    for name, recipe in VARIANTS.items():
        path = recipe.encode(ffmpeg_bin, d)
        fmt = subprocess.run([str(ffprobe_bin), "-v", "error", "-select_streams", "v:0",
                              "-show_entries", "stream=pix_fmt", "-of", "csv=p=0", str(path)],
                             capture_output=True, text=True, check=True).stdout.strip()
        assert fmt == recipe.decoded_pix_fmt, (name, fmt)
        out[name] = (path, fmt)
    return out


def _framemd5(res: subprocess.CompletedProcess) -> list[tuple[str, str, str]]:
    """(pts, size, md5) per frame of framemd5 output."""
    rows = []
    for line in res.stdout.splitlines():
        if line and not line.startswith("#"):
            f = [x.strip() for x in line.split(",")]
            rows.append((f[2], f[4], f[5]))
    return rows


def software(run_ffmpeg, clip: Path, fmt: str) -> list[tuple[str, str, str]]:
    return _framemd5(run_ffmpeg("-hide_banner", "-nostdin", "-v", "error", "-i", clip,
                                "-f", "framemd5", "-pix_fmt", fmt, "-", timeout=120))


def assert_hwaccel_ran(stderr: str, gpu_frames: bool = True) -> None:
    assert INIT_LINE in stderr, "the Vulkan hwaccel did not initialise (software fallback?):\n" + stderr[-3000:]
    if gpu_frames:
        # the filter graph's input is fed Vulkan frames, not software ones
        assert re.search(r"pixfmt:vulkan\b", stderr), "frames did not come out as Vulkan frames:\n" + stderr[-3000:]
    assert "Failed setup for format vulkan" not in stderr
    assert "hwaccel initialisation returned error" not in stderr


def assert_same_frames(sw, hw, n: int, what: str) -> None:
    assert len(sw) == n, f"{what}: the software decoder gave {len(sw)} frames, not {n}"
    assert len(hw) == len(sw), f"{what}: {len(hw)} Vulkan frames vs {len(sw)} software frames"
    bad = [i for i, (a, b) in enumerate(zip(sw, hw)) if a != b]
    assert not bad, f"{what}: frames {bad} differ (software {[sw[i] for i in bad]}, Vulkan {[hw[i] for i in bad]})"


# ---------------------------------------------------------------------------- validation (started first)

def _layer_installed() -> bool:
    dirs = [Path(p) for p in ("/usr/share/vulkan/explicit_layer.d", "/etc/vulkan/explicit_layer.d",
                              "/usr/local/share/vulkan/explicit_layer.d")]
    return any(d.glob("*khronos_validation*") for d in dirs if d.is_dir())


@pytest.fixture(scope="module", autouse=True)
def validated_runs(request, hw_clips, ffmpeg_bin, tmp_path_factory):
    """Start the validated GPU-resident decodes in the background as soon as the
    module starts; test_validation_layer_gpu_resident (last) collects them."""
    if not validation_requested() or not _layer_installed():
        yield None
        return
    d = tmp_path_factory.mktemp("validated")
    procs = {}
    env = dict(os.environ)
    env.pop("VK_LOADER_LAYERS_ENABLE", None)     # debug=1 below enables the layer itself
    for name in VALIDATED:
        clip = VARIANTS[name].encode(ffmpeg_bin, d) if VARIANTS[name].frames == 1 else \
            Recipe(**{**VARIANTS[name].params(), "frames": 1}).encode(ffmpeg_bin, d)
        argv = [str(ffmpeg_bin), "-hide_banner", "-nostdin", "-v", "verbose",
                "-init_hw_device", "vulkan=vk:0,debug=1", "-hwaccel", "vulkan",
                "-hwaccel_output_format", "vulkan", "-i", str(clip), "-f", "null", "-"]
        procs[name] = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                       text=True, env=env)
    yield procs
    for p in procs.values():          # only left running when the collecting test did not run
        if p.poll() is None:
            p.kill()
            p.communicate()


# ---------------------------------------------------------------------------- bit-exactness

@pytest.mark.parametrize("name", NAMES)
def test_vulkan_equals_software(hw_clips, run_ffmpeg, name):
    clip, fmt = hw_clips[name]
    sw = software(run_ffmpeg, clip, fmt)
    res = run_ffmpeg("-hide_banner", "-nostdin", "-v", "verbose", *HW_GPU, "-i", clip,
                     "-vf", f"hwdownload,format={fmt}", "-f", "framemd5", "-", timeout=120)
    assert_hwaccel_ran(res.stderr)
    assert_same_frames(sw, _framemd5(res), VARIANTS[name].frames, f"{name} ({VARIANTS[name].describe()})")


@pytest.mark.parametrize("name", AUTO_DOWNLOAD)
def test_automatic_download(hw_clips, run_ffmpeg, name):
    """-hwaccel vulkan without -hwaccel_output_format: FFmpeg downloads each frame itself."""
    clip, fmt = hw_clips[name]
    res = run_ffmpeg("-hide_banner", "-nostdin", "-v", "verbose", *HW, "-i", clip,
                     "-f", "framemd5", "-pix_fmt", fmt, "-", timeout=120)
    assert_hwaccel_ran(res.stderr, gpu_frames=False)
    assert_same_frames(software(run_ffmpeg, clip, fmt), _framemd5(res), VARIANTS[name].frames, name)


@pytest.mark.parametrize("name", THREADED)
def test_threads_4(hw_clips, run_ffmpeg, name):
    """-threads 4 with the hwaccel: the same frames, and no hang (timeout)."""
    clip, fmt = hw_clips[name]
    res = run_ffmpeg("-hide_banner", "-nostdin", "-v", "verbose", "-threads", "4", *HW_GPU, "-i", clip,
                     "-vf", f"hwdownload,format={fmt}", "-f", "framemd5", "-", timeout=60)
    assert_hwaccel_ran(res.stderr)
    assert_same_frames(software(run_ffmpeg, clip, fmt), _framemd5(res), VARIANTS[name].frames, name)


def _create_device_with(run_ffmpeg, option):
    """ffmpeg creating a Vulkan device with one device option, then one frame of lavfi."""
    return run_ffmpeg("-hide_banner", "-nostdin", "-v", "error",
                      "-init_hw_device", f"vulkan=vk:0,{option}",
                      "-f", "lavfi", "-i", "color=s=16x16", "-frames:v", "1", "-f", "null", "-",
                      check=False, timeout=60)


@pytest.mark.parametrize("value", ["x", "-1", "4x", "99999999999"])
def test_limit_queues_rejects_bad_values(run_ffmpeg, value):
    """Patch 15's device option: a value that is not a count fails device creation
    with a message naming the option, instead of being read as 0 (no limit)."""
    res = _create_device_with(run_ffmpeg, f"limit_queues={value}")
    assert res.returncode != 0
    assert f"Invalid limit_queues value: {value}" in res.stderr, res.stderr[-2000:]


@pytest.mark.parametrize("opt, value", [("download_threads", "9"), ("download_threads", "-1"),
                                        ("download_threads", "2x"), ("download_poll_us", "1000001"),
                                        ("download_poll_us", "x"), ("download_nontemporal", "2"),
                                        ("download_nontemporal", "-1"), ("download_nontemporal", "on")])
def test_download_options_reject_bad_values(run_ffmpeg, opt, value):
    """Patch 29's and 30's device options: a value out of range or not a number fails device
    creation with a message naming the option and its range."""
    res = _create_device_with(run_ffmpeg, f"{opt}={value}")
    assert res.returncode != 0
    assert f"Invalid {opt} value: {value} (0 to" in res.stderr, res.stderr[-2000:]


@pytest.mark.parametrize("name", NAMES)
def test_discrete_nontemporal_downloads(hw_clips, run_ffmpeg, fake_discrete_layer, tmp_path, name):
    """Patch 30's default (download_nontemporal not given, 1) with lavapipe reported as a
    discrete GPU (tests/tools/vk_fake_discrete.c): every download goes through the staging
    buffer and is copied out with non-temporal stores. Every variant (each plane layout, odd
    sizes, fields) gives the software decoder's frames, with the validation layer silent when
    asked for. tests/test_discrete_downloads.py covers download_nontemporal=0 and =1."""
    clip, fmt = hw_clips[name]
    stats = tmp_path / "stats.txt"
    env = vulkan_env(validate=True)
    env.update(VK_ADD_LAYER_PATH=str(fake_discrete_layer), VK_INSTANCE_LAYERS=FAKE_DISCRETE_LAYER,
               FD_STATS=str(stats))
    out = tmp_path / "vk.framemd5"     # the validation layer writes to stdout
    res = run_ffmpeg("-hide_banner", "-nostdin", "-v", "verbose", "-cpucount", "4",
                     "-init_hw_device", "vulkan=vk:0", "-hwaccel", "vulkan",
                     "-hwaccel_output_format", "vulkan", "-i", clip,
                     "-vf", f"hwdownload,format={fmt}", "-f", "framemd5", out, env=env, timeout=300)
    assert_hwaccel_ran(res.stderr)
    assert "(discrete)" in res.stderr, res.stderr[-2000:]
    # the staging path: the destination is not imported
    assert re.search(r"GetMemoryHostPointerProperties 0\b", stats.read_text()), stats.read_text()
    assert not validation_messages(res.stdout + res.stderr, KNOWN_LAYER_NOISE)
    hw = _framemd5(subprocess.CompletedProcess([], 0, stdout=out.read_text()))
    assert_same_frames(software(run_ffmpeg, clip, fmt), hw, VARIANTS[name].frames, name)


def test_limit_queues_one_queue(hw_clips, run_ffmpeg):
    """limit_queues=1: every family gets one queue, and decoding with frame threads
    (which then share that queue) gives the same frames as the software decoder."""
    clip, fmt = hw_clips["tff"]
    res = run_ffmpeg("-hide_banner", "-nostdin", "-v", "verbose", "-threads", "4",
                     "-init_hw_device", "vulkan=vk:0,limit_queues=1", "-hwaccel", "vulkan",
                     "-hwaccel_output_format", "vulkan", "-i", clip,
                     "-vf", f"hwdownload,format={fmt}", "-f", "framemd5", "-", timeout=60)
    assert_hwaccel_ran(res.stderr)
    used = re.findall(r"Using queue family \d+ \(queues: (\d+)\)", res.stderr)
    assert used and all(n == "1" for n in used), used
    assert_same_frames(software(run_ffmpeg, clip, fmt), _framemd5(res), VARIANTS["tff"].frames, "tff")


def test_frame_count_of_longer_clip(ffmpeg_bin, run_ffmpeg, tmp_path):
    """Every packet gives one frame on both paths, over more than the exec pool's depth."""
    clip = Recipe("nine", profile="lt", width=48, height=32, frames=9).encode(ffmpeg_bin, tmp_path)
    sw = software(run_ffmpeg, clip, "yuv422p10le")
    res = run_ffmpeg("-hide_banner", "-nostdin", "-v", "verbose", *HW_GPU, "-i", clip,
                     "-vf", "hwdownload,format=yuv422p10le", "-f", "framemd5", "-", timeout=120)
    assert_hwaccel_ran(res.stderr)
    assert_same_frames(sw, _framemd5(res), 9, "nine frames")
    assert len({h for _, _, h in sw}) == 9, "the frames should all differ"


# ---------------------------------------------------------------------------- pyprores.decode.native

NATIVE = ["4444xq", "alpha8", "bff-4444-alpha16", "quant-mat", "mbs1", "50x34", "aw-4444-alpha16-tff"]


@pytest.fixture(scope="module")
def native_sessions(request):
    """Vulkan and software sessions without the validation layer: the layer stalls
    10 s per plane whenever a decoder's frame pool is freed (see conftest.py), and
    validation is covered by the ffmpeg runs above."""
    from pyprores.decode import native
    if not native.available():
        pytest.fail("pyprores._native is not built: run ./scripts/setup")
    if not native.has_hwaccel("vulkan"):
        pytest.fail("the FFmpeg build has no ProRes Vulkan hwaccel")
    mp = pytest.MonkeyPatch()
    mp.setenv("PYPRORES_VALIDATION", "0")
    try:
        vk, sw = native.Session("vulkan"), native.Session("software")
    finally:
        mp.undo()
    yield vk, sw
    vk.close()
    sw.close()


@pytest.mark.parametrize("name", NATIVE)
def test_native_vulkan_session_equals_software_session(hw_clips, native_sessions, name):
    """Session("vulkan").decode == Session("software").decode, plane by plane.
    (tests/test_native.py compares both sessions with PyAV, and covers slice
    isolation on the Vulkan backend, on other clips.)"""
    import av
    import numpy as np
    vk, sw = native_sessions
    clip, fmt = hw_clips[name]
    with av.open(str(clip)) as c:
        st = c.streams.video[0]
        tag = st.codec_context.codec_tag
        packets = [bytes(p) for p in c.demux(st) if p.size]
    assert len(packets) == VARIANTS[name].frames
    for n, packet in enumerate(packets):
        a, b = vk.decode(packet, tag), sw.decode(packet, tag)
        assert a.pix_fmt == b.pix_fmt == fmt
        assert list(a.planes) == list(b.planes)
        for plane in b.planes:
            diff = np.argwhere(a.planes[plane] != b.planes[plane])
            assert len(diff) == 0, (f"{name} frame {n} plane {plane}: {len(diff)} samples differ, first at "
                                    f"(row, col) {tuple(diff[0])}")


# ---------------------------------------------------------------------------- validation layer

def test_noise_list_shared_with_csrc():
    """csrc/log.c's built-in filter drops nothing that conftest's list keeps,
    and the tests hand conftest's list to native sessions."""
    src = (REPO_ROOT / "csrc" / "log.c").read_text()
    m = re.search(r"validation_noise\[\]\s*=\s*\{(.*?)\};", src, re.S)
    assert m, "validation_noise[] not found in csrc/log.c"
    c_patterns = re.findall(r'"([^"]*)"', m.group(1))
    assert c_patterns
    for pat in c_patterns:
        assert any(pat in known for known in KNOWN_LAYER_NOISE), \
            f"csrc filters {pat!r}, which tests/conftest.py's KNOWN_LAYER_NOISE does not list"
    handed = os.environ.get("PYPRORES_VALIDATION_IGNORE", "").split(";")
    assert all(k in handed for k in KNOWN_LAYER_NOISE), handed


def test_invalid_image_layout_is_stock_ffmpeg(run_ffmpeg):
    """The InvalidImageLayout noise comes from stock FFmpeg (hwupload/hwdownload, no
    ProRes at all); if this layer ever stops reporting it, drop it from the list."""
    if not validation_requested() or not _layer_installed():
        pytest.skip("PYPRORES_VALIDATION is not 1 or the Khronos validation layer is missing")
    res = run_ffmpeg("-hide_banner", "-init_hw_device", "vulkan=vk:0,debug=1", "-filter_hw_device", "vk",
                     "-f", "lavfi", "-i", "color=s=64x48:d=0.08,format=yuv422p10le",
                     "-vf", "hwupload,hwdownload,format=yuv422p10le", "-f", "null", "-", timeout=120)
    assert "UNASSIGNED-CoreValidation-DrawState-InvalidImageLayout" in res.stderr
    assert validation_messages(res.stderr) == []


@pytest.mark.slow
def test_semaphore_timeout_is_stock_ffmpeg(ffmpeg_dir, tmp_path):
    """UNASSIGNED-VkSemaphore-state-timeout comes from stock libavutil pool frames:
    tests/tools/vk_pool_noise.c (no ProRes) triggers it, 10 s per semaphore."""
    if not _layer_installed():
        pytest.skip("the Khronos validation layer is missing")
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    exe = tmp_path / "vk_pool_noise"
    inc = [f"-I{ffmpeg_dir / 'include'}"]
    headers = REPO_ROOT.parent / "shared" / "vendor"
    inc += [f"-I{p / 'include'}" for p in sorted(headers.glob("vulkan-headers-*"))]
    subprocess.run([cc, "-O1", "-o", str(exe), str(REPO_ROOT / "tests" / "tools" / "vk_pool_noise.c"), *inc,
                    f"-L{ffmpeg_dir / 'lib'}", f"-Wl,-rpath,{ffmpeg_dir / 'lib'}", "-lavutil"], check=True)
    res = subprocess.run([str(exe), "1", "1"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "UNASSIGNED-VkSemaphore-state-timeout" in res.stderr
    assert "UNASSIGNED-CoreValidation-DrawState-InvalidImageLayout" in res.stderr
    assert validation_messages(res.stderr) == []


def test_validation_layer_gpu_resident(validated_runs):
    """GPU-resident decoding (-f null, no hwdownload) under VK_LAYER_KHRONOS_validation
    (-init_hw_device vulkan=vk:0,debug=1): nothing but the known layer noise."""
    if validated_runs is None:
        pytest.skip("PYPRORES_VALIDATION is not 1 or the Khronos validation layer is missing")
    failures = []
    for name, proc in validated_runs.items():
        try:
            _, err = proc.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
            failures.append(f"{name}: still running after 240 s")
            continue
        if proc.returncode != 0:
            failures.append(f"{name}: exit {proc.returncode}: {err[-1500:]}")
            continue
        if "Standard validation layer VK_LAYER_KHRONOS_validation is enabled" not in err:
            failures.append(f"{name}: the validation layer did not load")
        if INIT_LINE not in err:
            failures.append(f"{name}: the hwaccel did not run")
        msgs = validation_messages(err)
        if msgs:
            failures.append(f"{name}: {len(msgs)} validation message(s):\n  " + "\n  ".join(m[:600] for m in msgs[:5]))
    assert not failures, "\n".join(failures)
