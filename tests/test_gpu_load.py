"""tools/gpu/gpu-load, the load and soak steps of tools/gpu/gpu-run (issue 35): K concurrent ffmpeg
processes on the Vulkan device (lavapipe here), their summary, the exactness check against the
software decoder, failure counting, and the soak's memory samples and fit. Fast: a 128x72 clip
of 4 frames, K <= 3."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import load_script

REPO = Path(__file__).resolve().parent.parent
GPU_LOAD = REPO / "tools" / "gpu" / "gpu-load"
FMT = "yuv422p10le"


@pytest.fixture(scope="module")
def clip(ffmpeg_dir: Path, tmp_path_factory) -> Path:
    """4 frames of 128x72 ProRes 422 HQ, as gpu-run's q-422hq."""
    out = tmp_path_factory.mktemp("load") / "q.mov"
    subprocess.run([str(ffmpeg_dir / "bin" / "ffmpeg"), "-hide_banner", "-nostdin", "-v", "error", "-y",
                    "-f", "lavfi", "-i", "testsrc2=s=128x72:r=24:d=0.1667",
                    "-vf", f"noise=alls=14:allf=t+u,format={FMT}", "-frames:v", "4",
                    "-c:v", "prores_ks", "-profile:v", "3", str(out)], check=True, timeout=60)
    return out


def gpu_load(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(GPU_LOAD), *args], capture_output=True, text=True, timeout=120)


def software_framemd5(ffmpeg_dir: Path, clip: Path) -> str:
    return subprocess.run([str(ffmpeg_dir / "bin" / "ffmpeg"), "-v", "error", "-i", str(clip), "-f", "framemd5",
                           "-pix_fmt", FMT, "-"], capture_output=True, text=True, check=True, timeout=60).stdout


def test_load_summary(ffmpeg_dir: Path, clip: Path, tmp_path: Path):
    out = tmp_path / "load.json"
    res = gpu_load("load", "--ffmpeg", f"ff={ffmpeg_dir}", "--clip", str(clip), "--format", FMT,
                   "--ks", "1,2", "--frames", "6", "--variants", "gpu,start", "--diag-ks", "1,2",
                   "--exact-ks", "2", "--exact-frames", "5", "--workdir", str(tmp_path / "w"), "--json", str(out))
    assert res.returncode == 0, res.stdout + res.stderr
    j = json.loads(out.read_text())
    assert j["clip_frames"] == 4 and j["frames_per_process"] == 6
    assert j["reference"] == "software decoder of ff"
    for k in (1, 2):
        r = j["scaling"]["ff"][str(k)]
        # 6 frames of a 4-frame clip: two passes (-stream_loop 1), cut at 6
        assert r["k"] == k and r["frames"] == r["expected_frames"] == 6 * k
        assert r["failures"] == {} and len(r["procs"]) == k
        assert all(p["exit"] == 0 and p["frames"] == 6 and p["failure"] is None for p in r["procs"])
        assert r["fps"] > 0 and 0 < r["proc_wall_s"]["min"] <= r["proc_wall_s"]["max"] <= r["wall_s"]
        assert 0 < r["first_frame_s"]["max"] <= r["proc_wall_s"]["max"]
        # the processes' own CPU time, from wait4(): a Vulkan decode cannot take none
        assert r["cpu_ms_per_frame"] > 0 and r["vol_ctxsw_per_frame"] > 0
        assert 0 < r["cpu_busy"] <= 1
        assert ("gpu_mem_peak_mib" in r) == (shutil.which("nvidia-smi") is not None)
        assert "-stream_loop" in r["argv"] and "hwdownload,format=yuv422p10le" in r["argv"]
    gpu = j["diagnosis"]["gpu"]["2"]
    assert gpu["frames"] == 12 and "hwdownload,format=yuv422p10le" not in gpu["argv"]
    start = j["diagnosis"]["start"]["2"]
    assert start["frames"] == start["expected_frames"] == 2
    # the ratios between K = 1 and 2 that the hypotheses are read from (docs/ROBUSTNESS.md)
    sig = j["signals"]
    assert sig["start_wall_2/1"] > 0 and sig["cpu_per_frame_2/1_gpu"] > 0 and sig["fps_2_gpu/dl"] > 0
    assert sig["cpu_per_frame_2/1_dl"] == pytest.approx(
        j["scaling"]["ff"]["2"]["cpu_ms_per_frame"] / j["scaling"]["ff"]["1"]["cpu_ms_per_frame"], abs=0.01)
    assert not any(k.startswith("fps_2_start") for k in sig)
    ex = j["exact"]["ff"]["2"]
    assert ex["exact_procs"] == 2 and ex["failures"] == {} and ex["frames"] == 10
    assert "load ff exact K=2: 2/2 processes equal to the reference" in res.stdout


def test_exactness_catches_a_mismatch(ffmpeg_dir: Path, clip: Path, tmp_path: Path):
    """A reference with one frame's hash changed: every process must be reported."""
    ref = software_framemd5(ffmpeg_dir, clip).splitlines()
    last = max(i for i, ln in enumerate(ref) if ln and not ln.startswith("#"))
    ref[last] = ref[last][:-6] + ("000000" if not ref[last].endswith("000000") else "ffffff")
    bad = tmp_path / "bad.framemd5"
    bad.write_text("\n".join(ref) + "\n")
    out = tmp_path / "load.json"
    res = gpu_load("load", "--ffmpeg", f"ff={ffmpeg_dir}", "--clip", str(clip), "--format", FMT, "--ks", "1",
                   "--frames", "4", "--variants", "", "--exact-ks", "2", "--exact-frames", "6",
                   "--reference", str(bad), "--workdir", str(tmp_path / "w"), "--json", str(out))
    assert res.returncode == 1, res.stdout + res.stderr
    ex = json.loads(out.read_text())["exact"]["ff"]["2"]
    assert ex["exact_procs"] == 0 and ex["failures"] == {"mismatch": 2}
    # the 4th frame (index 3) is the first that differs; the processes themselves ran fine
    assert [p["first_mismatch"] for p in ex["procs"]] == [3, 3]
    assert all(p["exit"] == 0 and p["frames"] == 6 for p in ex["procs"])


def test_failed_processes_are_counted(ffmpeg_dir: Path, clip: Path, tmp_path: Path):
    """A device that does not exist: every process exits non-zero, counted, and the run fails."""
    out = tmp_path / "load.json"
    res = gpu_load("load", "--ffmpeg", f"ff={ffmpeg_dir}", "--clip", str(clip), "--format", FMT, "--ks", "2",
                   "--frames", "4", "--variants", "", "--exact-ks", "", "--device", "97",
                   "--workdir", str(tmp_path / "w"), "--json", str(out))
    assert res.returncode == 1
    r = json.loads(out.read_text())["scaling"]["ff"]["2"]
    assert r["frames"] == 0 and r["failures"] == {"exit": 2}
    assert "process 0: exit" in res.stdout


def test_soak_samples_memory(ffmpeg_dir: Path, clip: Path, tmp_path: Path):
    csv, out = tmp_path / "soak.csv", tmp_path / "soak.json"
    res = gpu_load("soak", "--ffmpeg", f"ff={ffmpeg_dir}", "--clip", str(clip), "--format", FMT,
                   "--frames", "4000", "--interval", "0.05", "--max-time", "60", "--workdir", str(tmp_path / "w"),
                   "--csv", str(csv), "--json", str(out))
    j = json.loads(out.read_text())
    assert res.returncode == 0, res.stdout + res.stderr
    assert j["frames"] == 4000 and j["clip_frames"] == 4 and not j["stopped_at_max_time"] and j["exit"] == 0
    rows = csv.read_text().splitlines()
    assert rows[0] == ("t_s,frames,rss_mib,rss_anon_mib,rss_file_mib,rss_shmem_mib,vm_data_mib,maps,"
                       "gpu_used_mib,gpu_process_mib")
    assert len(rows) - 1 == j["samples"] >= 3
    cells = [r.split(",") for r in rows[1:]]
    frames = [int(c[1]) for c in cells]
    assert frames == sorted(frames) and all(float(c[2]) > 10 for c in cells)
    # RSS is its anonymous, file and shared parts (to rounding), and a process has mappings
    assert all(abs(float(c[2]) - float(c[3]) - float(c[4]) - float(c[5])) < 0.5 and int(c[7]) > 10 for c in cells)
    assert j["fits"]["rss"]["samples"] >= 3 and j["flat"]["rss"] is True
    # flat is judged on the second half: its own fit, from half the frames on
    h = j["last_half"]["rss"]
    assert h["samples"] >= 2 and h["from_frame"] >= j["half_frames"] == round(0.5 * frames[-1])
    assert 1 <= len(j["curves"]["rss"]) <= 10 and j["curves"]["rss"][-1]["to_frame"] == frames[-1]
    assert "fitted rise over the second half" in res.stdout and "soak ff curve rss," in res.stdout


def test_soak_mallstat_samples_malloc_inside_the_process(ffmpeg_dir: Path, clip: Path, tmp_path: Path):
    """--mallstat LIB: tools/gpu/probes/mallstat.c LD_PRELOADed; malloc's bytes in use and free
    sampled inside the decoding process, beside its RSS."""
    lib = tmp_path / "libmallstat.so"
    subprocess.run(["cc", "-O2", "-Wall", "-Werror", "-shared", "-fPIC", "-o", str(lib),
                    str(REPO / "tools" / "gpu" / "probes" / "mallstat.c"), "-lpthread"], check=True, timeout=60)
    csv, out = tmp_path / "soak.csv", tmp_path / "soak.json"
    res = gpu_load("soak", "--ffmpeg", f"ff={ffmpeg_dir}", "--clip", str(clip), "--format", FMT,
                   "--frames", "8000", "--interval", "0.05", "--max-time", "60", "--mallstat", str(lib),
                   "--env", "MALLOC_ARENA_MAX=2", "--workdir", str(tmp_path / "w"), "--csv", str(csv),
                   "--json", str(out))
    assert res.returncode == 0, res.stdout + res.stderr
    j = json.loads(out.read_text())
    assert j["mallstat"] and j["env"] == ["MALLOC_ARENA_MAX=2"]
    header, *rows = csv.read_text().splitlines()
    assert header.endswith(",malloc_in_use_mib,malloc_free_mib")
    in_use = [float(r.split(",")[-2]) for r in rows if r.split(",")[-2]]
    assert in_use and all(0 < v < 2048 for v in in_use)          # a decoder holds some heap
    assert j["fits"]["malloc_in_use"] is not None and "malloc_in_use" in j["curves"]
    # the sampler's own file, one line per half interval from the library's load
    own = (tmp_path / "w" / "mallstat-ff.csv").read_text().splitlines()
    assert own[0].startswith("t_s,in_use_mib,free_mib") and len(own) >= 3


def test_soak_poolstat_counts_buffer_pools(ffmpeg_dir: Path, clip: Path, tmp_path: Path):
    """--poolstat LIB: tools/gpu/probes/poolstat.c counts the buffers of each AVBufferPool that
    libavcodec, libavfilter and libavformat make: hwdownload's frame pool (libavfilter, one pool
    per plane of a 128x72 4:2:2 10-bit frame) holds at least one buffer, and the decoder's
    own pools are seen too."""
    lib = tmp_path / "libpoolstat.so"
    subprocess.run(["cc", "-O2", "-Wall", "-Werror", "-shared", "-fPIC", "-o", str(lib),
                    str(REPO / "tools" / "gpu" / "probes" / "poolstat.c"), "-ldl", "-lpthread"], check=True,
                   timeout=60)
    out, pools = tmp_path / "soak.json", tmp_path / "pools.csv"
    res = gpu_load("soak", "--ffmpeg", f"ff={ffmpeg_dir}", "--clip", str(clip), "--format", FMT,
                   "--frames", "8000", "--interval", "0.05", "--max-time", "60", "--poolstat", str(lib),
                   "--pools-csv", str(pools), "--workdir", str(tmp_path / "w"), "--json", str(out))
    assert res.returncode == 0, res.stdout + res.stderr
    j = json.loads(out.read_text())
    assert pools.read_text().startswith("t_s,pool,creator,size,buffers,mib\n")
    filt = [q for q in j["pools"] if q["creator"].startswith("libavfilter")]
    # Y of 128x72 at 2 bytes a sample, Cb and Cr half as wide (plus FFmpeg's padding)
    assert len(filt) >= 3 and all(q["buffers_end"] >= 1 and q["size"] >= 64 * 72 * 2 for q in filt), filt
    assert any(q["creator"].startswith("libavcodec") for q in j["pools"]), j["pools"]
    assert all(q["buffers_end"] >= q["buffers_at_half"] for q in j["pools"])
    assert "soak ff pools: " in res.stdout


def test_curve_and_second_half():
    gl = load_script("gpu-load")
    xs = list(range(0, 100001, 1000))
    # a step of 35 MiB at 36% of the run, flat before and after it: the whole run's fit rises,
    # the second half's does not
    ys = [400.0 + (35 if x >= 36000 else 0) for x in xs]
    assert gl.growth(xs, ys, 10000)["fitted_rise_mib"] > 16
    assert abs(gl.growth(xs, ys, 50000)["fitted_rise_mib"]) < 0.1
    c = gl.curve(xs, ys)
    assert [s["max"] for s in c] == [400.0] * 3 + [435.0] * 7 and c[-1]["to_frame"] == 100000
    assert c[3]["min"] == 400.0


def test_load_steady_windows(ffmpeg_dir: Path, clip: Path, tmp_path: Path):
    """--steady S: processes loop the clip until stopped; the frames of an S-second window in
    which all K run, the start-up (all running) and teardown timed on their own; exactness
    runs as before."""
    out = tmp_path / "load.json"
    res = gpu_load("load", "--ffmpeg", f"ff={ffmpeg_dir}", "--clip", str(clip), "--format", FMT,
                   "--ks", "1,2", "--steady", "1", "--settle", "0.2", "--variants", "lq1,nocache,start",
                   "--diag-ks", "2", "--exact-ks", "2", "--exact-frames", "5", "--workdir", str(tmp_path / "w"),
                   "--json", str(out))
    assert res.returncode == 0, res.stdout + res.stderr
    j = json.loads(out.read_text())
    for k in (1, 2):
        r = j["scaling"]["ff"][str(k)]
        assert r["mode"] == "window" and r["failures"] == {} and r["k"] == k
        assert 0.9 < r["window_s"] < 2 and r["steady_fps"] > 0 and r["window_frames"] > 0
        assert r["per_process_fps"]["min"] > 0 and r["all_running_s"] > 0 and r["teardown_s"] >= 0
        assert 0 <= r["sys_ms_per_frame"] <= r["cpu_ms_per_frame"]
        # stopped by SIGINT: ffmpeg's exit status after a signal, no frame count asked
        assert all(p["exit"] == 255 and p["failure"] is None for p in r["procs"])
        assert "-frames:v" not in r["argv"] and r["argv"][r["argv"].index("-stream_loop") + 1] == "-1"
        # the window's frames are part of what the processes decoded
        assert r["window_frames"] <= r["frames"]
    d = j["diagnosis"]
    assert "limit_queues=1" in d["lq1"]["2"]["argv"][d["lq1"]["2"]["argv"].index("-init_hw_device") + 1]
    assert d["nocache"]["2"]["mode"] == "window" and d["start"]["2"].get("mode") is None
    assert d["start"]["2"]["frames"] == 2                       # one frame each, not windowed
    assert j["exact"]["ff"]["2"]["exact_procs"] == 2
    assert "load ff scaling, steady fps (all K running): K=1 " in res.stdout


def test_load_rounds(ffmpeg_dir: Path, clip: Path, tmp_path: Path):
    """--rounds N: every cell (build/variant) at each K in every round, the K of a cell back to
    back and in reverse order every other round; the rounds' statistics and ratios; a variant's
    environment (nt: glibc's non-temporal threshold) reaches its processes."""
    out = tmp_path / "load.json"
    res = gpu_load("load", "--ffmpeg", f"ff={ffmpeg_dir}", "--clip", str(clip), "--format", FMT,
                   "--ks", "1,2", "--diag-ks", "1,2", "--variants", "nt", "--steady", "0.6", "--settle", "0.1",
                   "--rounds", "2", "--exact-ks", "none", "--workdir", str(tmp_path / "w"), "--json", str(out))
    assert res.returncode == 0, res.stdout + res.stderr
    j = json.loads(out.read_text())
    rd = j["rounds"]
    assert rd["n"] == 2 and not j["scaling"]["ff"] and not j["diagnosis"] and not j["exact"]
    assert [(c["variant"], c["ks"]) for c in rd["cells"]] == [("dl", [1, 2]), ("nt", [1, 2])]
    for cell in ("ff/dl", "ff/nt"):
        for k in ("1", "2"):
            runs = rd["runs"][cell][k]
            assert len(runs) == 2 and all(r["mode"] == "window" and r["steady_fps"] > 0 and r["k"] == int(k)
                                          and r["failures"] == {} for r in runs)
        one, two = rd["runs"][cell]["1"], rd["runs"][cell]["2"]
        # round 1: K=1 then K=2; round 2 reversed
        assert one[0]["started_s"] < two[0]["started_s"] and two[1]["started_s"] < one[1]["started_s"]
    nt = rd["runs"]["ff/nt"]["2"][0]
    assert nt["env"] == {"GLIBC_TUNABLES": "glibc.cpu.x86_non_temporal_threshold=0x40000"}
    assert rd["runs"]["ff/dl"]["2"][0]["env"] == {}
    # the dynamic loader of this machine reports the tunable as nt sets it
    assert j["nt_threshold"]["nt"] == "0x40000" and j["nt_threshold"]["default"] != "0x40000"
    sm = rd["summary"]
    dl2 = sm["ff/dl"]["by_k"]["2"]
    fps = [r["steady_fps"] for r in rd["runs"]["ff/dl"]["2"]]
    assert dl2["steady_fps"] == fps and dl2["min"] == min(fps) and dl2["max"] == max(fps)
    ratio = sm["ff/dl"]["k_ratio"]["2/1"]
    assert list(sm["ff/dl"]["k_ratio"]) == ["2/1"] and ratio["rounds"] == 2
    assert ratio["per_round"][1] == pytest.approx(fps[1] / rd["runs"]["ff/dl"]["1"][1]["steady_fps"], abs=1e-3)
    assert sm["ff/nt"]["vs_dl"]["1"]["rounds"] == 2 and "vs_dl" not in sm["ff/dl"]
    assert "load round 2/2, steady fps: ff/dl K=1 " in res.stdout
    assert "load ff rounds dl K=2/K=1 per round " in res.stdout and "load ff rounds nt/dl: K=1 per round" in res.stdout


def test_load_rounds_budget(ffmpeg_dir: Path, clip: Path, tmp_path: Path):
    """--budget: after the first round, no round that would end past it; the summary is of the
    rounds done."""
    out = tmp_path / "load.json"
    res = gpu_load("load", "--ffmpeg", f"ff={ffmpeg_dir}", "--clip", str(clip), "--format", FMT,
                   "--ks", "1,2", "--variants", "", "--steady", "0.3", "--settle", "0.1", "--rounds", "5",
                   "--budget", "0.5", "--exact-ks", "none", "--workdir", str(tmp_path / "w"), "--json", str(out))
    assert res.returncode == 0, res.stdout + res.stderr
    rd = json.loads(out.read_text())["rounds"]
    assert rd["done"] == 1 and len(rd["runs"]["ff/dl"]["1"]) == len(rd["runs"]["ff/dl"]["2"]) == 1
    assert rd["summary"]["ff/dl"]["k_ratio"]["2/1"]["rounds"] == 1
    assert "load: 1 of 5 rounds in " in res.stdout and "load ff rounds dl K=2/K=1 per round" in res.stdout


def test_rounds_summary_ratios_and_verdicts():
    """The rounds' statistics from known figures: K=16 below K=4 in every round, a variant
    above dl in every round at K=16, a round without a window left out of the ratios."""
    gl = load_script("gpu-load")

    def w(fps: float | None) -> dict:
        return {"steady_fps": fps, "cpu_ms_per_frame": 12.0, "sys_ms_per_frame": 2.0, "cpu_busy": 0.8,
                "all_running_s": 2.0, "teardown_s": 1.0}
    runs = {"ff/dl": {"4": [w(1000.0), w(1010.0), w(990.0)], "16": [w(980.0), w(1000.0), w(985.0)]},
            "ff/nt": {"4": [w(1000.0), w(1020.0), w(980.0)], "16": [w(1010.0), None, w(1000.0)]}}
    sm = gl.rounds_summary(runs, 3)
    r = sm["ff/dl"]["k_ratio"]["16/4"]
    assert r["per_round"] == [0.98, pytest.approx(0.9901, abs=1e-4), pytest.approx(0.9949, abs=1e-4)]
    assert r["at_or_above_1"] == 0 and r["rounds"] == 3 and r["max"] < 1
    assert sm["ff/dl"]["by_k"]["4"]["mean"] == 1000.0 and sm["ff/dl"]["by_k"]["4"]["spread_pct"] == 2.0
    nt = sm["ff/nt"]
    assert nt["by_k"]["16"]["steady_fps"] == [1010.0, None, 1000.0] and nt["by_k"]["16"]["mean"] == 1005.0
    assert nt["k_ratio"]["16/4"]["per_round"][1] is None and nt["k_ratio"]["16/4"]["rounds"] == 2
    assert nt["k_ratio"]["16/4"]["at_or_above_1"] == 2
    v = nt["vs_dl"]["16"]
    assert v["rounds"] == 2 and v["above_1"] == 2 and v["per_round"][0] == pytest.approx(1010 / 980, abs=1e-4)
    lines = gl.rounds_lines(sm, 3)
    assert any(ln.startswith("load ff rounds dl K=16/K=4 per round 0.980 0.990 0.995") and
               ln.endswith("K=16 below K=4 in every round") for ln in lines)
    assert any(ln.startswith("load ff rounds nt K=16/K=4") and ln.endswith("K=16 >= K=4 in every round")
               for ln in lines)
    assert any(ln.startswith("load ff rounds nt/dl: K=4 per round 1.000 1.010 0.990") for ln in lines)
    mixed = gl.rounds_summary({"ff/dl": {"4": [w(1000.0), w(1000.0)], "16": [w(990.0), w(1010.0)]}}, 2)
    assert gl.rounds_lines(mixed, 2)[-1].endswith("K=16 >= K=4 in 1 of 2 rounds: equal within the noise")
    # three K: the largest over each smaller one, the nearest first
    three = gl.rounds_summary({"ff/dl": {"1": [w(600.0)], "4": [w(1000.0)], "16": [w(1010.0)]}}, 1)
    assert list(three["ff/dl"]["k_ratio"]) == ["16/4", "16/1"]
    assert three["ff/dl"]["k_ratio"]["16/1"]["per_round"] == [pytest.approx(1010 / 600, abs=1e-4)]


def test_variants_compose(tmp_path: Path):
    """Variants joined with '+': each part's options, no other; the environment of nt and nocache."""
    gl = load_script("gpu-load")
    b = gl.Build("ff", tmp_path)
    argv = gl.ffmpeg_argv(b, "cpu2+nt", tmp_path / "c.mov", FMT, 0, 0, "0", 17)
    assert argv[argv.index("-cpucount") + 1] == "2" and argv[argv.index("-threads") + 1] == "17"
    assert argv[argv.index("-init_hw_device") + 1] == "vulkan=vk:0"
    argv = gl.ffmpeg_argv(b, "dt2+poll0+lq2+ft1", tmp_path / "c.mov", FMT, 0, 0, "0", 17)
    assert argv[argv.index("-init_hw_device") + 1] == "vulkan=vk:0,limit_queues=2,download_threads=2,download_poll_us=0"
    assert argv[argv.index("-filter_threads") + 1] == "1" and "-threads" not in argv and "-cpucount" not in argv
    argv = gl.ffmpeg_argv(b, "dnt+dt2", tmp_path / "c.mov", FMT, 0, 0, "0", 17)
    assert argv[argv.index("-init_hw_device") + 1] == "vulkan=vk:0,download_threads=2,download_nontemporal=1"
    assert gl.Variant("dnt").env({"X": "1"}) == {"X": "1"}     # the device option, not glibc's tunable
    # dnt0: patch 30's option off (its default is 1), with glibc's tunable or not
    argv = gl.ffmpeg_argv(b, "dnt0+nt", tmp_path / "c.mov", FMT, 0, 0, "0", 17)
    assert argv[argv.index("-init_hw_device") + 1] == "vulkan=vk:0,download_nontemporal=0"
    assert "GLIBC_TUNABLES" in gl.Variant("dnt0+nt").env({}) and gl.Variant("dnt0").env({}) == {}
    argv = gl.ffmpeg_argv(b, "dl", tmp_path / "c.mov", FMT, 0, 0, "0", 17)
    assert argv[argv.index("-init_hw_device") + 1] == "vulkan=vk:0"     # the build's default
    with pytest.raises(gl.UsageError, match="given twice"):
        gl.Variant("dnt+dnt0")
    with pytest.raises(gl.UsageError, match="unknown variant 'dnt2'"):
        gl.Variant("dnt2")
    argv = gl.ffmpeg_argv(b, "gpu+t8", tmp_path / "c.mov", FMT, 0, 0, "0", 17)
    assert argv[argv.index("-threads") + 1] == "8" and "-vf" not in argv
    env = gl.Variant("nt+nocache").env({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2", "X": "1"})
    assert env == {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2:glibc.cpu.x86_non_temporal_threshold=0x40000",
                   "X": "1", "__GL_SHADER_DISK_CACHE": "0"}
    assert gl.Variant("vkstart").one_frame and gl.Variant("vkstart").vktime and not gl.Variant("start").vktime
    with pytest.raises(gl.UsageError, match="given twice"):
        gl.Variant("start+vkstart")


def test_window_counts_a_process_that_ends_early(ffmpeg_dir: Path, tmp_path: Path):
    """A process that exits before it is stopped (here: no such input) is a failure."""
    gl = load_script("gpu-load")
    argv = [str(ffmpeg_dir / "bin" / "ffmpeg"), "-v", "error", "-progress", "pipe:1", "-i", str(tmp_path / "none.mov"),
            "-f", "null", "-"]
    procs, w = gl.run_window([argv], {}, tmp_path, "x", 0.5, 0.1, 10, 0)
    r = gl.summarize_window(procs, w)
    assert r["steady_fps"] is None and r["failures"].get("not_all_running") == 1
    assert r["failures"].get("exit") == 1 or r["failures"].get("short") == 1


def test_vktime_summary_concurrency(tmp_path: Path):
    """Calls that never overlap across processes (one at a time: concurrency 1) against calls
    that all run at once (concurrency K)."""
    gl = load_script("gpu-load")
    for i in range(4):
        (tmp_path / f"vk-{i}.json").write_text(json.dumps({
            "functions": [{"name": "vkCreateDevice", "calls": 1, "total_s": 0.2, "max_s": 0.2},
                          {"name": "vkCreateComputePipelines", "calls": 2, "total_s": 0.1, "max_s": 0.06}],
            "timeline": [{"at_s": 0.2 * i, "dur_s": 0.2, "name": "vkCreateDevice", "tid": 1},
                         {"at_s": 1.0, "dur_s": 0.1, "name": "vkCreateComputePipelines", "tid": 1}]}))
    s = gl.vktime_summary(sorted(tmp_path.glob("vk-*.json")))
    f = {x["name"]: x for x in s["functions"]}
    assert s["processes"] == 4
    assert f["vkCreateDevice"]["concurrency"] == pytest.approx(1.0)
    assert f["vkCreateDevice"]["s_per_process"] == pytest.approx(0.2) and f["vkCreateDevice"]["to_s"] == pytest.approx(0.8)
    assert f["vkCreateComputePipelines"]["concurrency"] == pytest.approx(4.0)
    assert f["vkCreateComputePipelines"]["calls_per_process"] == 2


def test_soak_stops_at_max_time(ffmpeg_dir: Path, clip: Path, tmp_path: Path):
    """Too few frames in the time given: stopped with SIGINT and failed, not hung."""
    out = tmp_path / "soak.json"
    res = gpu_load("soak", "--ffmpeg", f"ff={ffmpeg_dir}", "--clip", str(clip), "--format", FMT,
                   "--clip-frames", "4", "--frames", "10000000", "--interval", "0.1", "--max-time", "1",
                   "--workdir", str(tmp_path / "w"), "--json", str(out))
    j = json.loads(out.read_text())
    assert res.returncode == 1 and j["stopped_at_max_time"] and 0 < j["frames"] < 10000000
    assert "only" in res.stdout


def test_growth_fit():
    gl = load_script("gpu-load")
    xs = list(range(0, 100001, 5000))
    # 1 MiB per 1000 frames after a warm-up jump in the first 10%: the jump is left out
    ys = [100.0 + (400 if x >= 5000 else 0) + x / 1000 for x in xs]
    f = gl.growth(xs, ys, warmup=10000)
    assert f["slope_mib_per_10k_frames"] == pytest.approx(10.0)
    assert f["fitted_rise_mib"] == pytest.approx(90.0) and f["from_frame"] == 10000
    flat = gl.growth(xs, [200.0 + (x // 5000) % 2 for x in xs], warmup=10000)
    assert abs(flat["fitted_rise_mib"]) < 1
    assert gl.growth([0, 1], [1.0, 2.0], warmup=0) is None          # too few samples to fit
    assert gl.growth(xs, [None] * len(xs), warmup=0) is None          # nothing sampled


def test_frames_at_interpolates_progress():
    gl = load_script("gpu-load")
    progress = [(1.0, 0), (2.0, 10), (3.0, 30)]
    assert gl.frames_at(progress, 0.5) == 0
    assert gl.frames_at(progress, 1.5) == 5
    assert gl.frames_at(progress, 2.5) == 20
    assert gl.frames_at(progress, 9.0) == 30


@pytest.mark.parametrize("args, message", [
    (["--ks", "0,4"], "at least 1"),
    (["--ks", "a"], "comma-separated integers"),
    (["--variants", "gpu,nosuch"], "unknown variant 'nosuch'"),
    (["--variants", "t2+t4"], "'t' given twice"),
    (["--variants", "cpu2+t4"], "cpuN sets -threads itself"),
    (["--variants", "dt0"], "at least 1"),
    (["--rounds", "2"], "it needs --steady"),
    (["--rounds", "2", "--steady", "1", "--budget", "-1"], "--budget takes seconds"),
    (["--rounds", "2", "--steady", "1", "--variants", "start"], "start and vkstart have none"),
    (["--diag-build", "nope"], "--diag-build nope: not one of"),
    (["--variants", "vkstart"], "variant vkstart needs --vktime"),
    (["--steady", "-1"], "--steady and --settle take seconds"),
])
def test_load_usage_errors(ffmpeg_dir: Path, clip: Path, args: list[str], message: str):
    res = gpu_load("load", "--ffmpeg", str(ffmpeg_dir), "--clip", str(clip), "--format", FMT, *args)
    assert res.returncode == 2 and message in res.stderr


def test_missing_build_is_a_usage_error(tmp_path: Path, clip: Path):
    res = gpu_load("soak", "--ffmpeg", f"x={tmp_path}", "--clip", str(clip), "--format", FMT)
    assert res.returncode == 2 and "no " in res.stderr and "bin/ffmpeg" in res.stderr
