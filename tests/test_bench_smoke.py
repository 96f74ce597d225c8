"""tools/gpu/bench runs end to end on tiny clips (lavapipe in CI) and checks bit-exactness."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _ffmpeg_dir() -> Path:
    ffdir = Path(os.environ.get("PYPRORES_FFMPEG_DIR", REPO / "build" / "ffmpeg"))
    if not (ffdir / "bin" / "ffmpeg").exists():
        pytest.skip("no FFmpeg build; run ./scripts/setup")
    return ffdir


def _bench(tmp_path: Path, *args: str) -> tuple[dict, str]:
    """tools/gpu/bench --quick ARGS: its JSON result and its stdout (it must succeed)."""
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "gpu" / "bench"), *args, "--quick",
                           "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(out.read_text()), proc.stdout


def test_bench_quick_runs_and_reports_bitexact(tmp_path):
    result, stdout = _bench(tmp_path, "--ffmpeg", str(_ffmpeg_dir()))
    assert result["clips"], "no clip was benchmarked"
    for clip in result["clips"]:
        assert clip["check"]["bitexact"], clip
        assert clip["check"]["frames_sw"] == clip["check"]["frames_vk"] > 0
        for mode in ("sw-all", "sw-1", "vk", "vk-dl", "demux", "api", "api-dl", "py", "py-stream"):
            assert clip["modes"][mode]["fps"] > 0
        # the demux-only ceiling reads the same packets as the decoding runs
        assert clip["modes"]["demux"]["frames"] == clip["modes"]["vk"]["frames"] > 0
        # decbench decodes every pass of the clip once it is warm, and the
        # CPU time it reports is per frame of those passes
        for mode in ("api", "api-dl", "py", "py-stream"):
            m = clip["modes"][mode]
            assert m["frames"] == result["loops"] * clip["frames_per_pass"], (mode, m)
            assert m["steady_cpu_us_per_frame"] > 0
        # the Python path ran here (this interpreter has pyprores), it was not skipped
        assert clip["modes"]["py"]["session_s"] > 0 and clip["modes"]["py-stream"]["session_s"] > 0
        # the streaming API's own frames were held against the software decoder's
        n = clip["check"]["frames_sw"]
        assert clip["modes"]["py-stream"]["frames_identical"] == f"{n}/{n}"
        assert clip["modes"]["py-stream"]["download"] == "gpu"
    assert "bit-exact" in stdout


def test_bench_err_detect_modes(tmp_path):
    """The A/B of the damaged-slice report: vk-ed and api-ed run with
    -err_detect bitstream (decbench --err-detect bitstream) beside vk and api."""
    result, stdout = _bench(tmp_path, "--ffmpeg", str(_ffmpeg_dir()), "--clips", "q-422hq",
                            "--modes", "vk,vk-ed,api,api-ed,api-dl-ed")
    clip = result["clips"][0]
    for mode in ("vk", "vk-ed", "api", "api-ed", "api-dl-ed"):
        assert clip["modes"][mode]["fps"] > 0, mode
    assert clip["modes"]["api-ed"]["frames"] == clip["modes"]["api"]["frames"] > 0
    assert "vk-ed" in stdout


def test_bench_times_several_builds_in_turn(tmp_path):
    """--ffmpeg NAME=DIR twice (here the same build under two names): every clip is
    checked and timed per build, and the JSON names the builds."""
    ffdir = _ffmpeg_dir()
    result, stdout = _bench(tmp_path, "--ffmpeg", f"one={ffdir}", "--ffmpeg", f"two={ffdir}",
                            "--clips", "q-422hq", "--modes", "vk,api,py")
    assert [b["name"] for b in result["builds"]] == ["one", "two"]
    for b in result["builds"]:
        assert b["version"].startswith("7.1") and b["libavcodec"].startswith("61.")
        assert b["series"], "scripts/setup's BUILDINFO lists the series"
        assert b["vulkan_process_startup_s"] > 0
    (clip,) = result["clips"]
    for name in ("one", "two"):
        per = clip["builds"][name]
        assert per["check"]["bitexact"] and per["check"]["required"]
        for mode in ("vk", "api", "py"):
            assert per["modes"][mode]["fps"] > 0, (name, mode)
    # the first build's results stay where a single build's are
    assert clip["check"] == clip["builds"]["one"]["check"] and clip["modes"] == clip["builds"]["one"]["modes"]
    assert "| one " in stdout and "| two " in stdout


def test_bench_rejects_unknown_native(tmp_path):
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "gpu" / "bench"), "--ffmpeg", "a=/nonexistent",
                           "--native", "b=/x", "--quick"], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "--native b=/x" in proc.stderr


def test_bench_file_modes(tmp_path):
    """open_decoder as users call it, on a file of --loops passes over the clip:
    the C library's reader (py-file) and PyAV's packets (py-file-pyav), both
    bit-exact, with open, first frame, steady and whole-file figures."""
    result, _ = _bench(tmp_path, "--ffmpeg", str(_ffmpeg_dir()), "--clips", "q-4444-alpha",
                       "--modes", "py-file,py-file-pyav")
    clip = result["clips"][0]
    n = clip["check"]["frames_sw"]
    for mode, reader in (("py-file", "native"), ("py-file-pyav", "pyav-packets")):
        m = clip["modes"][mode]
        assert m["reader"] == reader and m["frames_identical"] == f"{n}/{n}", m
        assert m["frames"] == result["loops"] * n
        assert m["open_s"] > 0 and m["first_frame_s"] > 0 and m["steady_fps"] > 0
        assert 0 < m["whole_fps"] < m["steady_fps"]


def test_bench_pump_host_modes(tmp_path):
    """The pump's host sinks as bench modes (no CUDA needed): py-cuda-host copies
    by transfer, py-cuda-hostsh by the compute shader CUDA frames use; both
    bit-exact, each copy counted on its own side. The cudacopy summary (gpu-run's
    cudacopy step) of that run, twice over as two rounds: each mode against numpy (the
    first py-stream mode, the reference) and numpy with another count in flight (-tN)."""
    result, _ = _bench(tmp_path, "--ffmpeg", str(_ffmpeg_dir()), "--clips", "q-4444-alpha",
                       "--modes", "py-stream-ed,py-stream-ed-t2,py-cuda-host,py-cuda-hostsh,"
                       "py-cuda-hostsh-async")
    clip = result["clips"][0]
    n = clip["check"]["frames_sw"]
    assert clip["modes"]["py-stream-ed-t2"]["in_flight"] == 2
    assert clip["modes"]["py-stream-ed-t2"]["frames_identical"] == f"{n}/{n}"
    for mode, side in (("py-cuda-host", "transfer"), ("py-cuda-hostsh", "shader"),
                       ("py-cuda-hostsh-async", "shader")):
        m = clip["modes"][mode]
        assert m["frames_identical"] == f"{n}/{n}", m
        other = "shader" if side == "transfer" else "transfer"
        assert m["copies"][side] > 0 and m["copies"][other] == 0, m["copies"]
    summary = subprocess.run([sys.executable, str(REPO / "tools" / "gpu" / "bench"), "--cudacopy-summary",
                              str(tmp_path / "bench.json"), str(tmp_path / "bench.json")],
                             capture_output=True, text=True, timeout=60)
    assert summary.returncode == 0, summary.stderr
    numpy_fps = clip["modes"]["py-stream-ed"]["steady_fps"]
    hostsh = clip["modes"]["py-cuda-hostsh"]["steady_fps"]
    lines = summary.stdout.splitlines()
    assert f"cudacopy q-4444-alpha: 2 rounds" in summary.stdout and f"numpy (py-stream-ed) {numpy_fps} fps" in summary.stdout
    assert any(l.startswith(f"cudacopy q-4444-alpha py-cuda-hostsh (shader copy into host buffers (numpy), "
                            f"8 in flight): "
                            f"{hostsh} fps, {hostsh / numpy_fps:.2f}x numpy (") for l in lines), lines
    assert any(l.startswith("cudacopy q-4444-alpha py-stream-ed-t2 (numpy, 2 in flight): ") for l in lines), lines
    assert all("x py-stream-ed-t2)" in l for l in lines if " py-cuda-host" in l), lines
    assert any(l.startswith(f"cudacopy q-4444-alpha py-cuda-host (py-cuda-host, 8 in flight): ") for l in lines), lines


def test_cudacopy_summary_zero_copy_needs_own_pool_frames(tmp_path):
    """py-cuda-zc (_cuda_copy="none") counts only where every frame was the decoder's
    own image of the session's pool: the summary fails a run whose frames were copied
    (or came from the default pool), and reports a good one against numpy and the bar."""
    def bench_json(copies, pool):
        modes = {"py-stream-ed": {"steady_fps": 1000.0, "in_flight": 8},
                 "py-cuda-t16": {"steady_fps": 1400.0, "in_flight": 16,
                                 "copies": {"shader": 10, "transfer": 0, "cuda": 0, "none": 0}},
                 "py-cuda-zc-t16": {"steady_fps": 2100.0, "in_flight": 16, "copies": copies,
                                    "frame_pool": pool, "frames_identical": "4/4"}}
        p = tmp_path / f"{pool}-{copies['none']}.json"
        p.write_text(json.dumps({"device": "test", "clips": [{"clip": "c", "modes": modes}]}))
        return p

    def summary(p):
        return subprocess.run([sys.executable, str(REPO / "tools" / "gpu" / "bench"),
                               "--cudacopy-summary", str(p), str(p)],
                              capture_output=True, text=True, timeout=60)

    good = summary(bench_json({"shader": 0, "transfer": 0, "cuda": 0, "none": 10}, "linear"))
    assert good.returncode == 0, good.stdout + good.stderr
    line = next(l for l in good.stdout.splitlines() if l.startswith("cudacopy c py-cuda-zc-t16 "))
    assert "2100.0 fps, 2.10x numpy, meets the 2x bar" in line and " none 10" in line, line
    assert "cudacopy c: no copy over the shader copy (py-cuda-zc-t16 / py-cuda-t16) 1.50x" in good.stdout
    for copies, pool in (({"shader": 10, "transfer": 0, "cuda": 0, "none": 0}, "default"),
                         ({"shader": 2, "transfer": 0, "cuda": 0, "none": 8}, "linear"),
                         ({"shader": 0, "transfer": 0, "cuda": 0, "none": 10}, "default")):
        bad = summary(bench_json(copies, pool))
        assert bad.returncode == 1 and "NOT the decoder's own images every frame" in bad.stdout, \
            (copies, pool, bad.stdout)
