"""The binary wheel (scripts/build-wheel, issue 24) and what pyprores says when Vulkan is missing.

test_wheel_installs_and_decodes builds the wheel from build/ffmpeg, installs it into a fresh venv
outside the repository (no PYTHONPATH, no PYPRORES_FFMPEG_DIR, cwd elsewhere) and runs the
installed `pyprores compare` on the default clips on lavapipe, a decode to numpy on both
backends, the bundled ffmpeg, and the no-device error. 30-50 s on the shared 2-core machine
(wheel 10-20 s with its tools venv, venv and pip install 7-10 s, the runs a few seconds): so it is
in the default run, not behind the slow marker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

from pyprores import runtime

REPO_ROOT = Path(__file__).resolve().parent.parent

NO_DEVICE_ENV = {"VK_DRIVER_FILES": "/nonexistent/icd.json", "VK_ICD_FILENAMES": "/nonexistent/icd.json"}


# -- the hint (no wheel needed) ---------------------------------------------------------------

def test_hint_without_loader_names_the_loader_package(monkeypatch):
    monkeypatch.setattr(runtime, "vulkan_loader_available", lambda: False)
    hint = runtime.vulkan_hint("Unable to open the libvulkan library!")
    assert "libvulkan1" in hint and "mesa-vulkan-drivers" in hint and "--backend software" in hint


def test_hint_without_driver_names_the_driver_package(monkeypatch):
    monkeypatch.setattr(runtime, "vulkan_loader_available", lambda: True)
    hint = runtime.vulkan_hint("Instance creation failure: VK_ERROR_INCOMPATIBLE_DRIVER")
    assert "no device" in hint and "mesa-vulkan-drivers" in hint and "libvulkan1" not in hint


def test_checkout_layout_uses_build_ffmpeg(monkeypatch):
    for k in ("PYPRORES_FFMPEG_DIR", "PYPRORES_BUILD", "PYPRORES_NATIVE_DIR"):
        monkeypatch.delenv(k, raising=False)
    assert runtime.bundled_ffmpeg_dir() is None          # no pyprores/bin in a checkout
    assert runtime.ffmpeg_dir() == REPO_ROOT / "build" / "ffmpeg"
    monkeypatch.setenv("PYPRORES_FFMPEG_DIR", "/x")
    assert runtime.ffmpeg_dir() == Path("/x")


def test_session_without_device_says_what_to_install(ffmpeg_dir):
    native = pytest.importorskip("pyprores.decode.native")
    if not native.available():
        pytest.skip("pyprores._native is not built")
    code = textwrap.dedent("""
        from pyprores.decode import native
        try:
            native.Session("vulkan")
        except native.DeviceError as e:
            print(e)
        with native.Session("software") as s:   # the software path needs no Vulkan
            print(s.device_name)
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYPRORES_VALIDATION"}
    r = subprocess.run([sys.executable, "-c", code], env={**env, **NO_DEVICE_ENV}, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    error, device = r.stdout.strip().splitlines()
    assert "could not create a Vulkan device" in error and "mesa-vulkan-drivers" in error, error
    assert device == "cpu"


# -- the wheel --------------------------------------------------------------------------------

DECODE = textwrap.dedent("""
    import json, sys
    import numpy as np
    import pyprores
    from pyprores.decode import native
    out = {"pyprores": pyprores.__file__, "ffmpeg": native.ffmpeg_version(),
           "hwaccel": native.has_hwaccel("vulkan"), "frames": []}
    with pyprores.open(sys.argv[1]) as src, native.Session("vulkan") as vk, \\
            native.Session("software") as sw:
        tag = src.info.codec_tag
        for pkt in src.packets():
            a, b = vk.decode(pkt, tag), sw.decode(pkt, tag)
            assert isinstance(a.planes["Y"], np.ndarray) and a.planes["Y"].dtype == np.uint16
            out["frames"].append({k: [list(v.shape), bool(np.array_equal(v, b.planes[k]))]
                                  for k, v in a.planes.items()})
        out["device"] = vk.device_name
    maps = open("/proc/self/maps").read().split()
    out["libavcodec"] = sorted({m for m in maps if "libavcodec" in m})
    print(json.dumps(out))
""")


def wheel_metadata(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as z:
        return z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()


def _install_in_fresh_venv(wheel: Path, tmp_path: Path) -> tuple[Path, Path, dict]:
    """A new venv with only the wheel installed (binary wheels only: nothing is compiled on
    install, no compiler, FFmpeg or Vulkan headers needed), a working directory outside the
    checkout, and the environment to run its commands in."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = _clean_env(venv)
    pip = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check",
                          "--only-binary=:all:", str(wheel)], cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    return venv, work, env


def _clean_env(venv: Path) -> dict[str, str]:
    """A user's environment: nothing pointing into the checkout or its builds."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PYPRORES_", "PYTHON", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "LD_PRELOAD"))}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def test_wheel_installs_and_decodes(tmp_path, ffmpeg_dir):
    # the build under test (build/ffmpeg, or build/ffmpeg-NAME with PYPRORES_BUILD=NAME) goes
    # into the wheel; its version as the checkout's extension reports it
    native = pytest.importorskip("pyprores.decode.native")
    if not native.available():
        pytest.skip("pyprores._native is not built")
    version = native.ffmpeg_version()
    dist = tmp_path / "dist"
    build = subprocess.run(
        [str(REPO_ROOT / "scripts" / "build-wheel"), "--no-setup", "--out", str(dist)],
        env={**os.environ, "PYPRORES_FFMPEG_DIR": str(ffmpeg_dir), "PYTHON": sys.executable},
        capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stdout + build.stderr
    wheel = Path(build.stdout.strip().splitlines()[-1])
    assert wheel.parent == dist and "-cp311-abi3-manylinux_2_" in wheel.name, wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    assert "pyprores/bin/ffmpeg" in names and "pyprores/bin/ffprobe" in names
    assert any(n.startswith("pyprores/_native") for n in names)
    libs = {n.split("/")[1].split("-")[0] for n in names if n.startswith("pyprores.libs/")}
    assert {"libavcodec", "libavutil", "libavformat"} <= libs, names
    assert "License-Expression: LGPL-2.1-or-later" in wheel_metadata(wheel)   # no --enable-gpl here

    venv, work, env = _install_in_fresh_venv(wheel, tmp_path)

    # pyprores compare on the default clips, on lavapipe
    cmp = subprocess.run([str(venv / "bin" / "pyprores"), "compare", "--workdir", "clips", "--json", "-",
                          "--quiet"], cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert cmp.returncode == 0, cmp.stdout + cmp.stderr
    report = json.loads(cmp.stdout)
    assert report["passed"] is True, cmp.stdout
    ff_info = report["ffmpeg"]   # the wheel's own build: its directory is the package, its BUILDINFO inside
    assert ff_info["version"] == version and ff_info["ffmpeg_dir"].startswith(str(venv)), ff_info
    assert ff_info["series"] and any("prores" in p.lower() for p in ff_info["series"]), ff_info
    clips = sorted((work / "clips").glob("*.mov"))
    assert len(clips) == 3
    hq = work / "clips" / "hq422.mov"    # 4:2:2 10-bit, for the ffmpeg runs' download format

    # decoding to numpy with `python -c`, both backends, the libraries the wheel's own
    dec = subprocess.run([str(venv / "bin" / "python"), "-c", DECODE, str(clips[0])], cwd=work, env=env,
                         capture_output=True, text=True, timeout=600)
    assert dec.returncode == 0, dec.stdout + dec.stderr
    out = json.loads(dec.stdout)
    site = str(venv)
    assert out["pyprores"].startswith(site) and out["ffmpeg"] == version and out["hwaccel"], out
    assert out["frames"] and all(same for f in out["frames"] for _, same in f.values()), out
    ours = [p for p in out["libavcodec"] if "pyprores.libs" in p]
    assert len(ours) == 1 and ours[0].startswith(site), out["libavcodec"]
    assert not any(str(REPO_ROOT) in p or "/.cache/pyprores/" in p for p in out["libavcodec"]), out

    # the bundled ffmpeg, through its entry point, with the Vulkan hwaccel
    ff = subprocess.run([str(venv / "bin" / "pyprores-ffmpeg"), "-v", "error", "-init_hw_device", "vulkan=vk:0",
                         "-hwaccel", "vulkan", "-hwaccel_output_format", "vulkan", "-i", str(hq),
                         "-vf", "hwdownload,format=yuv422p10le", "-f", "framemd5", "-"],
                        cwd=work, env=env, capture_output=True, text=True, timeout=600)
    sw = subprocess.run([str(venv / "bin" / "pyprores-ffmpeg"), "-v", "error", "-i", str(hq),
                         "-f", "framemd5", "-"], cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert ff.returncode == 0 and sw.returncode == 0, ff.stderr + sw.stderr
    md5 = [[line.split(",")[-1] for line in r.stdout.splitlines() if not line.startswith("#")] for r in (ff, sw)]
    assert md5[0] and md5[0] == md5[1]

    # no Vulkan device: the error names the package; the software backend works
    nodev = {**env, **NO_DEVICE_ENV}
    bad = subprocess.run([str(venv / "bin" / "pyprores"), "compare", str(clips[0]), "--quiet"], cwd=work,
                         env=nodev, capture_output=True, text=True, timeout=600)
    assert bad.returncode == 2 and "mesa-vulkan-drivers" in bad.stderr, bad.stdout + bad.stderr
    soft = subprocess.run([str(venv / "bin" / "pyprores"), "compare", str(clips[0]), "--quiet",
                           "--backend", "software"], cwd=work, env=nodev, capture_output=True, text=True,
                          timeout=600)
    assert soft.returncode == 0, soft.stdout + soft.stderr


def test_user_wheel_transcodes(tmp_path):
    """scripts/build-wheel --user (issue 32): GPL in its metadata, the system libraries of the user
    build vendored, and its pyprores-ffmpeg, installed in a fresh venv, decodes FFmpeg's MXF sample
    and Apple's 4444 sample (clean aperture) on the GPU into H.264 and DNxHR."""
    user = REPO_ROOT / "build" / "ffmpeg-user"
    mxf = REPO_ROOT.parent / "shared" / "samples" / "fate_Meridian-Apple_ProResProxy-HDR10.mxf"
    clap = REPO_ROOT.parent / "shared" / "samples" / "fate_prores4444_with_transparency.mov"
    if not (user / "bin" / "ffmpeg").is_file():
        pytest.skip("no build/ffmpeg-user (scripts/setup --user)")
    if not (mxf.is_file() and clap.is_file()):
        pytest.skip("the samples of ../shared/samples are not here")
    dist = tmp_path / "dist"
    build = subprocess.run([str(REPO_ROOT / "scripts" / "build-wheel"), "--user", "--no-setup", "--out", str(dist)],
                           env={**os.environ, "PYTHON": sys.executable}, capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stdout + build.stderr
    wheel = Path(build.stdout.strip().splitlines()[-1])
    meta = wheel_metadata(wheel)
    assert "License-Expression: GPL-2.0-or-later" in meta and "License-File: LICENSES/GPL-2.0-or-later.txt" in meta
    libs = {n.split("/")[1].split("-")[0] for n in zipfile.ZipFile(wheel).namelist() if n.startswith("pyprores.libs/")}
    assert {"libx264", "libx265", "libSvtAv1Enc", "libvpx", "libzimg", "libopus"} <= libs, libs

    venv, work, env = _install_in_fresh_venv(wheel, tmp_path)
    hw = ["-init_hw_device", "vulkan=vk:0", "-hwaccel", "vulkan", "-hwaccel_output_format", "vulkan"]

    def ff(*args: str) -> None:
        res = subprocess.run([str(venv / "bin" / "pyprores-ffmpeg"), "-hide_banner", "-nostdin", "-v", "error",
                              *map(str, args)], cwd=work, env=env, capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stderr[-3000:]

    def probe(path: str) -> str:
        return subprocess.run([str(venv / "bin" / "pyprores-ffprobe"), "-v", "error", "-select_streams", "v:0",
                               "-show_entries", "stream=codec_name,width,height", "-of", "csv=p=0", path],
                              cwd=work, env=env, capture_output=True, text=True, check=True).stdout.strip().strip(",")

    ff(*hw, "-i", mxf, "-map", "0:v", "-map", "0:a:0", "-vf", "hwdownload,format=yuv422p10le,format=yuv420p",
       "-c:v", "libx264", "-preset", "ultrafast", "-c:a", "aac", "review.mp4")
    assert probe("review.mp4") == "h264,1280,720"
    ff(*hw, "-i", clap, "-map", "0:v", "-map", "0:a", "-vf", "hwdownload,format=yuva444p12le,format=yuv422p10le",
       "-c:v", "dnxhd", "-profile:v", "dnxhr_hqx", "-c:a", "pcm_s24le", "edit.mxf")
    assert probe("edit.mxf") == "dnxhd,1888,1062"      # the clean aperture, applied on the GPU

    # tools/gpu/wheel-transcode, which the GPU machine's wheel step runs on the samples: the
    # wheel's `pyprores-ffmpeg -hwaccel vulkan` into each delivery format, outputs that decode
    # and equal those of software decoding, and the wheel's `pyprores compare`
    mkv = REPO_ROOT.parent / "shared" / "samples" / "fate_prores_bz2.mkv"
    report = tmp_path / "transcode.json"
    res = subprocess.run([sys.executable, str(REPO_ROOT / "tools" / "gpu" / "wheel-transcode"), "--bin",
                          str(venv / "bin"), "--seconds", "0.1", "--seq-frames", "2", "--compare-frames", "2",
                          "--workdir", str(tmp_path / "transcode"), "--json", str(report), str(mxf), str(mkv)],
                         cwd=work, env=env, capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stdout + res.stderr[-3000:]
    results = json.loads(report.read_text())["results"]
    assert [(r["file"], r["job"]) for r in results] == [
        (f.name, j) for f in (mxf, mkv) for j in ("h264", "proxy", "dnxhr", "tiff", "compare")]
    assert all(r["ok"] for r in results), [r for r in results if not r["ok"]]
    assert {r["codec"] for r in results if r["job"] != "compare"} == {"h264", "prores", "dnxhd", "tiff"}
