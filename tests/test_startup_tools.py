"""The start-up instruments of issue 20: tools/gpu/probes/vktime.c (Vulkan call-timing shim),
tools/gpu/probes/startprobe.c (start-up probe) and tools/gpu/startup-summary, which gpu-run's startup step
uses. Compiled against each FFmpeg build there is and run on lavapipe: about a second each."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import c_compiler, load_script

REPO = Path(__file__).resolve().parent.parent
BUILDS = {"7.1.5": REPO / "build" / "ffmpeg", "9.0.2": REPO / "build" / "ffmpeg-9.0.2"}


@pytest.fixture(scope="module")
def shim(tmp_path_factory) -> Path:
    """tools/gpu/probes/vktime.c built as gpu-pack builds it: DIR/libvulkan.so.1."""
    gp = load_script("gpu-pack")
    d = tmp_path_factory.mktemp("vktime")
    cc = c_compiler()
    os.environ.setdefault("CC", cc)
    gp.pack_vktime(d, gp.vulkan_include(BUILDS["7.1.5"] if BUILDS["7.1.5"].exists() else None), dry=False)
    return d


def build_probe(ffdir: Path, out: Path) -> Path:
    gp = load_script("gpu-pack")
    exe = out / "startprobe"
    subprocess.run([c_compiler(), "-O2", "-Wall", "-Werror", "-o", str(exe), str(REPO / "tools" / "gpu" / "probes" / "startprobe.c"),
                    f"-I{ffdir / 'include'}", f"-I{gp.vulkan_include(ffdir)}", f"-L{ffdir / 'lib'}",
                    "-lavformat", "-lavcodec", "-lavutil", "-ldl", "-lpthread", f"-Wl,-rpath,{ffdir / 'lib'}"],
                   check=True)
    return exe


def test_vktime_exports_only_the_entry_points(shim: Path):
    nm = shutil.which("nm")
    if not nm:
        pytest.skip("no nm")
    syms = subprocess.run([nm, "-D", "--defined-only", str(shim / "libvulkan.so.1")], capture_output=True,
                          text=True, check=True).stdout.split()
    assert sorted(s for s in syms if s.startswith("vk")) == ["vkGetDeviceProcAddr", "vkGetInstanceProcAddr"]


@pytest.mark.parametrize("series", sorted(BUILDS))
def test_probe_device_mode_under_the_shim(series: str, shim: Path, tmp_path: Path):
    """startprobe's FFmpeg mode (no file: the device alone, limit_queues=1) under vktime: both
    timelines share the probe's main() as origin, hwcontext_vulkan's messages are stamped."""
    ffdir = BUILDS[series]
    if not (ffdir / "include" / "libavcodec").is_dir():
        pytest.skip(f"no FFmpeg {series} build")
    exe = build_probe(ffdir, tmp_path)
    env = dict(os.environ, LD_LIBRARY_PATH=f"{shim}:{ffdir / 'lib'}",
               VKTIME_OUT=f"{tmp_path / 'vk.txt'},{tmp_path / 'vk.json'}")
    env.pop("VK_INSTANCE_LAYERS", None)
    res = subprocess.run([str(exe), "--opt", "limit_queues=1"], capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 0, res.stderr[-2000:]
    probe = json.loads(res.stdout)
    assert probe["mode"] == "ffmpeg" and probe["options"] == "limit_queues=1"
    assert probe["ffmpeg"].startswith(series[:3])
    assert 0 < probe["device_create_s"] < probe["main_s"]
    texts = [m["text"] for m in probe["marks"]]
    assert any("selected" in t for t in texts), texts          # "Device 0 selected: ..."
    assert texts[-1] == "device freed"
    report = json.loads((tmp_path / "vk.json").read_text())
    assert report["origin"] == "VKTIME_T0"
    calls = {f["name"]: f for f in report["functions"]}
    for name in ("vkCreateInstance", "vkCreateDevice", "vkDestroyDevice", "vkDestroyInstance"):
        assert calls[name]["calls"] == 1, name
    # the device was created inside av_hwdevice_ctx_create, on the probe's clock
    created = calls["vkCreateDevice"]["first_at_s"]
    start = next(m["at_s"] for m in probe["marks"] if m["text"].startswith("av_hwdevice_ctx_create("))
    assert start < created < start + probe["device_create_s"]
    assert "vkCreateDevice" in (tmp_path / "vk.txt").read_text()


def test_probe_raw_mode(tmp_path: Path):
    ffdir = next((d for d in BUILDS.values() if (d / "include" / "libavcodec").is_dir()), None)
    if ffdir is None:
        pytest.skip("no FFmpeg build")
    exe = build_probe(ffdir, tmp_path)
    res = subprocess.run([str(exe), "--raw"], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, LD_LIBRARY_PATH=str(ffdir / "lib")))
    assert res.returncode == 0, res.stderr[-2000:]
    raw = json.loads(res.stdout)
    names = [c["name"] for c in raw["configs"]]
    assert names[0].startswith("1 compute queue (") and names[-1].endswith(", again")
    assert "every queue of every family" in names
    assert all(r["result"] == 0 for c in raw["configs"] for r in c["runs"]), raw["configs"]
    assert raw["create_instance_s"] > 0


def test_summary_gathers_the_step(tmp_path: Path):
    ss = load_script("startup-summary")
    log = tmp_path / "startup-ff.log"
    log.write_text(
        "init_hw_device vulkan=vk:0: 0.790 s wall, 0.100 s user, 0.600 s sys\n"
        "init_hw_device vulkan=vk:0: 0.830 s wall, 0.100 s user, 0.600 s sys\n"
        "init_hw_device vulkan=vk:0: 0.800 s wall, 0.100 s user, 0.600 s sys\n"
        "init_hw_device vulkan=vk:0,limit_queues=1: 0.470 s wall, 0.100 s user, 0.300 s sys\n"
        "ffmpeg -version: 0.030 s wall, 0.010 s user, 0.010 s sys\n"
        "frames:v 1 vulkan=vk:0: 0.950 s wall, 0.300 s user, 0.600 s sys\n"
        "frames:v 1 vulkan=vk:0, __GL_SHADER_DISK_CACHE=0: 1.500 s wall, 0.900 s user, 0.600 s sys\n"
        "startprobe default: 0.900 s wall, 0.300 s user, 0.600 s sys\n"
        "startprobe limit_queues=1: 9.000 s wall, 0.300 s user, 0.600 s sys, exit 1\n")
    d = tmp_path / "d"
    d.mkdir()
    (d / "probe-default.json").write_text(json.dumps({
        "device_create_s": 0.54, "decoder_open_s": 0.001, "first_frame_s": 0.2, "first_frame_done_s": 0.25, "threads": 17,
        "packets_sent": 17, "decoder_close_s": 0.01, "device_free_s": 0.05, "main_s": 0.85}))
    (d / "vktime-device.json").write_text(json.dumps({"wrapped_total_s": 0.5, "functions": [
        {"name": "vkCreateDevice", "calls": 1, "total_s": 0.4, "max_s": 0.4, "first_at_s": 0.1}]}))
    (d / "raw.json").write_text(json.dumps({
        "device": "GPU", "loader_dlopen_s": 0.001, "create_instance_s": 0.05, "enumerate_s": 0.01,
        "destroy_instance_s": 0.01, "configs": [
            {"name": "1 compute queue (family 2)", "runs": [{"result": 0, "create_s": 0.05, "destroy_s": 0.01}]},
            {"name": "every queue of every family", "runs": [{"result": 0, "create_s": 0.4, "destroy_s": 0.2}]},
            {"name": "1 compute queue + VK_NV_optical_flow and its features",
             "runs": [{"result": 0, "create_s": 0.09, "destroy_s": 0.01}]}]}))
    out = tmp_path / "s.json"
    assert ss.main(["--build", "ff", "--log", str(log), "--dir", str(d), "--json", str(out)]) == 0
    j = json.loads(out.read_text())
    assert [r["wall_s"] for r in j["runs"]["init_hw_device vulkan=vk:0"]] == [0.79, 0.83, 0.8]
    assert j["runs"]["startprobe limit_queues=1"][0]["rc"] == 1
    assert j["probe"]["default"]["threads"] == 17 and j["vktime"]["device"]["wrapped_total_s"] == 0.5
    _, lines = ss.summarize("ff", log.read_text(), d)
    assert lines[0] == ("startup ff: whole process, medians: ffmpeg -version 0.030 s; device alone: default "
                        "0.800 s, limit_queues=1 0.470 s; -frames:v 1: default 0.950 s; -frames:v 1 with the "
                        "shader disk cache off 1.500 s")
    assert any("exec, linking and exit: 0.050 s" in l and "done on the GPU 0.250 s" in l for l in lines)
    assert any("every queue of every family 400.0+200.0 ms" in l for l in lines)
    assert any("VK_NV_optical_flow and its features 90.0+10.0 ms" in l for l in lines)
