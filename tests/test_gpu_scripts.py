"""tools/gpu/gpu-pack and tools/gpu/gpu-run (docs/GPU.md): argument parsing, the dry run, and the
ELF runpath rewrite that makes a packed build run from wherever it lands. Fast: no GPU, no
FFmpeg build needed."""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest

from conftest import gpu_run, load_script, write_gpu_pack

REPO = Path(__file__).resolve().parent.parent
GPU_PACK = REPO / "tools" / "gpu" / "gpu-pack"


@pytest.fixture
def pack(tmp_path: Path) -> Path:
    """A packed directory as tools/gpu/gpu-pack leaves it, with stub executables."""
    return write_gpu_pack(tmp_path / "gpu", {"ff13": "18 patches", "ff10": "16 patches"})


def test_dry_run_plans_every_step(pack: Path, tmp_path: Path):
    res = gpu_run("--pack", str(pack), "--dry-run", "--timeout", "bench=200", "--fuzz-time", "60",
                  "check", "bench@ff10", "conformance@ff13,ff10", "fuzz-gpu", "ab@ff10,ff13", "memory",
                  "bench@ff10,ff13,ff10", out=tmp_path / "out")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    steps = [l for l in lines if l.startswith("step ")]
    out = tmp_path / "out"
    # no @BUILD: the first build of the MANIFEST
    assert steps == [
        f"step check ff13: timeout 240 s, log {out}/check-ff13.log",
        f"step bench ff10: timeout 200 s, log {out}/bench-ff10.log",
        f"step conformance ff13: timeout 300 s, log {out}/conformance-ff13.log",
        f"step conformance ff10: timeout 300 s, log {out}/conformance-ff10.log",
        f"step fuzz-gpu ff13: timeout 210 s, log {out}/fuzz-gpu-ff13.log",
        f"step ab ff10 ff13: timeout 360 s, log {out}/ab-ff10-ff13.log",
        f"step memory ff13: timeout 150 s, log {out}/memory-ff13.log",
        f"step bench ff10 ff13 ff10: timeout 200 s, log {out}/bench-ff10-ff13-ff10.log",
    ]
    text = res.stdout
    assert f"--ffmpeg {pack}/ff10 --decbench {pack}/ff10/bin/decbench" in text
    assert "--seed-base 70" in text and "--time 60" in text
    assert "total of the step limits: 1960 s" in text
    # several builds side by side: one bench run naming each
    assert (f"--ffmpeg ff13={pack}/ff13 --decbench ff13={pack}/ff13/bin/decbench --ffmpeg ff10={pack}/ff10"
            in text and f"--json {out}/bench-ff10-ff13-ff10.json" in text)
    assert "split the steps over several calls" in text      # more than one call's 600 s
    assert not (tmp_path / "out").exists()                     # a dry run writes nothing


def test_dry_run_passes_bench_options(pack: Path):
    res = gpu_run("--pack", str(pack), "--dry-run", "--clips", "4k-422hq", "--modes", "vk,api",
                  "--bench-args", "--repeat 5", "--device", "1", "bench")
    assert res.returncode == 0, res.stderr
    assert "--device 1 --clips 4k-422hq --modes vk,api --json $OUT/bench-ff13.json --repeat 5" in res.stdout
    assert "split the steps" not in res.stdout


@pytest.mark.parametrize("args, message", [
    ([], "no step given"),
    (["nosuch"], "unknown step 'nosuch'"),
    (["bench@ff99"], "unknown build 'ff99'"),
    (["ab@ff13"], "ab takes two builds"),
    (["--timeout", "bench", "bench"], "--timeout takes STEP=SECONDS"),
    (["--timeout", "nosuch=5", "bench"], "unknown step nosuch"),
    (["--clips", "8k-nothing", "bench"], "unknown clip 8k-nothing"),
    (["--fuzz-time", "x", "fuzz-gpu"], "take integers"),
    (["--cluster-files", "0", "cluster"], "take integers"),
    (["--frobnicate", "bench"], "unknown option --frobnicate"),
])
def test_usage_errors_exit_2(pack: Path, args: list[str], message: str):
    res = gpu_run("--pack", str(pack), "--dry-run", *args)
    assert res.returncode == 2, res.stdout
    assert message in res.stderr


def test_dry_run_cluster_step(pack: Path):
    res = gpu_run("--pack", str(pack), "--dry-run", "--cluster-files", "30", "cluster")
    assert res.returncode == 0, res.stderr
    assert "step cluster ff13: timeout 540 s" in res.stdout
    assert "tools/gpu/bench-cluster --files 30 --frames 4 --size 1920x1080" in res.stdout


@pytest.mark.parametrize("args, planned", [
    (["bandwidth@ff13", "--bandwidth-args", "--sizes 4096"],
     ["step bandwidth: timeout 240 s, log $OUT/bandwidth.log",
      "{pack}/bwprobe/bwprobe --device 0 --reps 20 --progress --json --sizes 4096 > $OUT/bandwidth.json",
      "total of the step limits: 240 s"]),
    (["--clips", "q-422hq", "startup"],
     ["step startup ff13: timeout 180 s",
      "{pack}/ff13/bin/startprobe --opt {{,limit_queues=4,limit_queues=1}} q-422hq",
      "{pack}/vktime/libvulkan.so.1"]),
])
def test_dry_run_probe_steps(pack: Path, args: list[str], planned: list[str]):
    """The steps of the C probes (tools/gpu/probes): bwprobe's bandwidths, startprobe under vktime."""
    res = gpu_run("--pack", str(pack), "--dry-run", *args)
    assert res.returncode == 0, res.stderr
    for line in planned:
        assert line.format(pack=pack) in res.stdout, line


def test_dry_run_load_and_soak_steps(pack: Path, tmp_path: Path):
    """load@A,B is one run with the builds side by side; soak one build; their options pass through."""
    res = gpu_run("--pack", str(pack), "--dry-run", "--clips", "4k-422hq", "--load-args", "--ks 1,4,16",
                  "--soak-args", "--frames 50000", "load@ff13,ff10", "soak@ff10", out=tmp_path / "out")
    assert res.returncode == 0, res.stderr
    out = tmp_path / "out"
    steps = [l for l in res.stdout.splitlines() if l.startswith("step ")]
    assert steps == [f"step load ff13 ff10: timeout 480 s, log {out}/load-ff13-ff10.log",
                     f"step soak ff10: timeout 330 s, log {out}/soak-ff10.log"]
    assert (f"tools/gpu/gpu-load load --ffmpeg ff13={pack}/ff13 --ffmpeg ff10={pack}/ff10 "
            f"--clip /tmp/gpu-run/clips/bench/4k-422hq.mov --device 0 --json {out}/load-ff13-ff10.json --ks 1,4,16"
            in res.stdout)
    assert (f"tools/gpu/gpu-load soak --ffmpeg ff10={pack}/ff10 --clip /tmp/gpu-run/clips/bench/4k-422hq.mov "
            f"--device 0 --csv {out}/soak-ff10.csv --json {out}/soak-ff10.json --frames 50000" in res.stdout)
    assert "split the steps over several calls" in res.stdout      # 480 + 330 s: two calls


def test_dry_run_soak_variants(pack: Path, tmp_path: Path):
    """--soak-variants plans one more soak process per variant, each with its own environment."""
    out = tmp_path / "out"
    res = gpu_run("--pack", str(pack), "--dry-run", "--clips", "4k-422hq", "--soak-variants",
                  "mmap1m:MALLOC_MMAP_THRESHOLD_=1048576;arena1:MALLOC_ARENA_MAX=1,MALLOC_TOP_PAD_=0",
                  "soak@ff10", out=out)
    assert res.returncode == 0, res.stderr
    assert (f"at the same time: soak --ffmpeg ff10-mmap1m={pack}/ff10 ... --json {out}/soak-ff10-mmap1m.json "
            "--env MALLOC_MMAP_THRESHOLD_=1048576") in res.stdout
    assert f"--json {out}/soak-ff10-arena1.json --env MALLOC_ARENA_MAX=1,MALLOC_TOP_PAD_=0" in res.stdout
    bad = gpu_run("--pack", str(pack), "--dry-run", "--soak-variants", "x:=1", "soak@ff10")
    assert bad.returncode == 2 and "--soak-variants takes NAME:VAR=VALUE" in bad.stderr


def test_dry_run_refusals_step(pack: Path):
    """Issue 35: the refusal streams through several builds in one run, the
    first one's software decoder the reference."""
    res = gpu_run("--pack", str(pack), "--dry-run", "--device", "1", "refusals@ff10,ff13", "refusals")
    assert res.returncode == 0, res.stderr
    steps = [l for l in res.stdout.splitlines() if l.startswith("step ")]
    assert [s.split(":")[0] for s in steps] == ["step refusals ff10 ff13", "step refusals ff13"]
    assert "timeout 180 s" in steps[0]
    assert (f"tests/tools/compare_refusals.py --device 1 --build {pack}/ff10 --build {pack}/ff13 "
            "tests/data/regressions/refuse-*.mov") in res.stdout


def test_missing_pack_and_out(pack: Path, tmp_path: Path):
    res = gpu_run("--pack", str(tmp_path / "none"), "check")
    assert res.returncode == 2 and "run tools/gpu/gpu-pack" in res.stderr
    res = gpu_run("--pack", str(pack), "check")               # a real run needs $OUT
    assert res.returncode == 2 and "$OUT is not set" in res.stderr


def test_help_lists_the_steps():
    res = gpu_run("--help")
    assert res.returncode == 0
    for step in ("check@B", "startup@B", "bench@B", "conformance@B", "fuzz-gpu@B", "ab@A,B", "memory@B", "cluster@B",
                 "load@B[,B...]", "soak@B", "refusals@B", "cudacopy@B"):
        assert step in res.stdout


def test_pack_rejects_bad_build_names(tmp_path: Path):
    gp = load_script("gpu-pack")
    assert gp.main(["--out", str(tmp_path / "g"), "--dry-run", "no-equals-sign"]) == 2
    assert gp.main(["--out", str(tmp_path / "g"), "--dry-run", "debs=/x"]) == 2
    assert gp.main(["--out", str(tmp_path / "g"), "--dry-run", "a=/x", "a=/y"]) == 2


def test_set_runpath_makes_a_binary_relocatable(tmp_path: Path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc or not shutil.which("readelf"):
        pytest.skip("needs cc and readelf")
    gp = load_script("gpu-pack")
    src = tmp_path / "hello.c"
    src.write_text('#include <stdio.h>\nint main(void) { puts("hello"); return 0; }\n')
    exe = tmp_path / "hello"
    old = "/a/long/absolute/build/directory/lib"
    subprocess.run([cc, "-o", str(exe), str(src), f"-Wl,-rpath,{old}"], check=True)
    gp.set_runpath(exe, "$ORIGIN/../lib")
    dyn = subprocess.run(["readelf", "-d", str(exe)], capture_output=True, text=True, check=True).stdout
    assert "[$ORIGIN/../lib]" in dyn and old not in dyn
    assert subprocess.run([str(exe)], capture_output=True, text=True).stdout == "hello\n"


def test_dry_run_workflow_step(pack: Path):
    """workflow@A,B: one tools/gpu/workflow run naming both builds, with the libraries of extlib."""
    res = gpu_run("--pack", str(pack), "--dry-run", "--workflow-frames", "48",
                  "--workflow-args", "--jobs h264", "workflow@ff13,ff10")
    assert res.returncode == 0, res.stderr
    assert "step workflow ff13 ff10: timeout 420 s" in res.stdout
    assert (f"LD_LIBRARY_PATH={pack}/ff13/lib:{pack}/extlib python3 tools/gpu/workflow --ffmpeg ff13={pack}/ff13 "
            f"--ffmpeg ff10={pack}/ff10 --device 0 --frames 48" in res.stdout)
    assert "--jobs h264" in res.stdout


def test_pack_copies_external_libraries(tmp_path: Path):
    """A build linking a library outside itself: gpu-pack copies it into extlib/ and links it
    from the build's lib/ (what the user build's libx264 ... need on the GPU machine)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc or not shutil.which("ldd"):
        pytest.skip("needs cc and ldd")
    gp = load_script("gpu-pack")
    ext = tmp_path / "sys"
    ext.mkdir()
    (tmp_path / "e.c").write_text("int ext_answer(void) { return 42; }\n")
    subprocess.run([cc, "-shared", "-fPIC", "-Wl,-soname,libext.so.1", "-o", str(ext / "libext.so.1"),
                    str(tmp_path / "e.c")], check=True)
    os.symlink("libext.so.1", ext / "libext.so")
    build = tmp_path / "build"
    (build / "bin").mkdir(parents=True)
    (build / "lib").mkdir()
    (tmp_path / "m.c").write_text("int ext_answer(void);\nint main(void) { return ext_answer() == 42 ? 0 : 1; }\n")
    for exe in ("ffmpeg", "ffprobe"):
        subprocess.run([cc, "-o", str(build / "bin" / exe), str(tmp_path / "m.c"), f"-L{ext}", "-lext",
                        f"-Wl,-rpath,{ext}"], check=True)
    out = tmp_path / "gpu"
    (out / "ff").mkdir(parents=True)
    (out / "ff" / "lib").mkdir()
    assert [p.name for p in gp.external_libs(build)] == ["libext.so.1"]
    assert gp.pack_external(build, out / "ff", out) == 1
    assert (out / "extlib" / "libext.so.1").is_file()
    link = out / "ff" / "lib" / "libext.so.1"
    assert link.is_symlink() and link.resolve() == (out / "extlib" / "libext.so.1").resolve()


def _wheel(path: Path) -> Path:
    """A small wheel-shaped zip with an executable, as scripts/build-wheel's carries bin/ffmpeg."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        info = zipfile.ZipInfo("pyprores/bin/ffmpeg")
        info.external_attr = (0o100755 << 16)
        z.writestr(info, "#!/bin/sh\necho wheel\n")
        z.writestr("pyprores/__init__.py", "")
        z.writestr("pyprores-0.1.0.dist-info/RECORD", "pyprores/__init__.py,,\n")
    return path


def _members(wheel: Path) -> dict[str, tuple[bytes, int]]:
    with zipfile.ZipFile(wheel) as z:
        return {i.filename: (z.read(i), (i.external_attr >> 16) & 0o777) for i in z.infolist()}


def test_xz_pack_and_run_unpack_round_trip(pack: Path, tmp_path: Path):
    """gpu-pack --xz puts the builds and the wheels (unzipped) into builds.tar.xz; a dry run of
    gpu-run plans from MANIFEST and leaves it packed (an unpacked pack may not fit a call); a real
    run unpacks it and zips each wheel again with the same files and modes."""
    gp = load_script("gpu-pack")
    whl = _wheel(pack / "dist" / "pyprores-0.1.0-cp311-abi3-manylinux_2_35_x86_64.whl")
    dep = _wheel(pack / "python" / "dep-1.0-py3-none-any.whl")
    want = {w.name: _members(w) for w in (whl, dep)}
    gp.pack_xz(pack, ["ff13", "ff10"])
    assert sorted(p.name for p in pack.iterdir()) == ["MANIFEST", "builds.tar.xz", "python"]
    assert not list((pack / "python").iterdir())

    res = gpu_run("--pack", str(pack), "--dry-run", "check@ff10")
    assert res.returncode == 0, res.stderr
    assert "step check ff10" in res.stdout and "left packed by the dry run" in res.stdout
    assert (pack / "builds.tar.xz").exists() and not (pack / "ff10").exists()

    # a real run: unpacked, wheels zipped again; then no device here (the stub ffmpeg fails)
    res = gpu_run("--pack", str(pack), "check@ff10", out=tmp_path / "out")
    assert res.returncode == 2 and "no Vulkan device" in res.stderr, res.stderr
    assert (pack / "ff10" / "bin" / "ffmpeg").is_file() and not (pack / "builds.tar.xz").exists()
    assert not (pack / "rezip").exists()
    assert _members(pack / "dist" / whl.name) == want[whl.name]
    assert _members(pack / "python" / dep.name) == want[dep.name]


def test_xz_pack_without_wheels(pack: Path):
    """gpu-pack --xz with no wheel to carry (no --python, no --wheel): the builds go into
    builds.tar.xz all the same, and nothing is left behind."""
    gp = load_script("gpu-pack")
    gp.pack_xz(pack, ["ff13", "ff10"])
    assert sorted(p.name for p in pack.iterdir()) == ["MANIFEST", "builds.tar.xz"]
    with tarfile.open(pack / "builds.tar.xz") as tar:
        names = tar.getnames()
    assert "ff13/bin/ffmpeg" in names and "ff10/bin/ffmpeg" in names


def test_dry_run_wheel_step_with_user_wheel(pack: Path):
    """The wheel step names the carried wheel, the samples and the 4K source it transcodes."""
    _wheel(pack / "dist" / "pyprores-0.1.0-cp311-abi3-manylinux_2_35_x86_64.whl")
    (pack / "samples").mkdir()
    (pack / "samples" / "a.mxf").write_bytes(b"x")
    res = gpu_run("--pack", str(pack), "--dry-run", "--workflow-frames", "96", "--wheel-args", "--seconds 1",
                  "wheel", "workflow@ff13,ff10")
    assert res.returncode == 0, res.stderr
    assert "pip install --no-index dist/pyprores-0.1.0-cp311-abi3-manylinux_2_35_x86_64.whl" in res.stdout
    assert "tools/gpu/workflow --sources-only --frames 96" in res.stdout
    assert "--device 0 --seconds 1 samples/a.mxf 4k-422hq.mov" in res.stdout
    assert "--markdown $OUT/workflow.md" in res.stdout


def test_wheel_transcode_rate_for_containers_without_one():
    """FFmpeg's Matroska sample states no frame rate (1 ms time base): MXF refuses 1000 fps, so the
    jobs add -r 24 there, and only there."""
    wt = load_script("wheel-transcode")
    assert wt.rate_args({"r_frame_rate": "1000/1", "avg_frame_rate": "0/0"}) == ["-r", "24"]   # the MKV
    assert wt.rate_args({"r_frame_rate": "60000/1001", "avg_frame_rate": "0/0"}) == []        # the MXF
    assert wt.rate_args({"r_frame_rate": "25/1", "avg_frame_rate": "25/1"}) == []
    assert wt.rate_args({}) == ["-r", "24"]


def test_workflow_table_puts_modes_side_by_side():
    """One row per source, job and build; 'yes' only when the vk output's hash is the sw one's."""
    wf = load_script("workflow")

    def R(build, mode, wall=None, fps=None, cpu=None, sha="", **kw):
        return wf.Run(source="s", job="compare" if mode == "sw+vk" else "h264", build=build, mode=mode,
                      wall_s=wall, fps=fps, cpu_s=cpu, sha256=sha or None, **kw)
    runs = [R("ours", "sw", 2.0, 60.0, 30.0, "a" * 64),
            R("ours", "vk", 1.0, 120.0, 10.0, "a" * 64, identical=True),
            R("ours", "vk-scale", 0.8, 150.0, 8.0, "c" * 64, identical=False, psnr=48.25),
            R("up", "sw", 2.0, 60.0, 30.0, "a" * 64),
            R("up", "vk", 1.0, 120.0, 10.0, "b" * 64, identical=False),
            R("up", "vk-scale", error="skipped: no scale_vulkan in this build"),
            R("-", "sw+vk", 5.0, 24.0, 9.0, "d" * 64, identical=True)]
    rows = wf.table_rows(runs, ["sw", "vk", "vk-scale"])
    assert rows[0][:3] == ["source", "job", "build"] and len(rows) == 4
    assert rows[1] == ["s", "h264", "ours", "2.00 / 60.0 / 30.00", "1.00 / 120.0 / 10.00",
                       "0.80 / 150.0 / 8.00 (PSNR 48.2 dB)", "yes " + "a" * 12]
    assert rows[2][-1].startswith("NO (bbbb") and rows[2][5].startswith("skipped")
    assert rows[3][:4] == ["s", "compare", "sw+vk", "5.00 / 24.0 / 9.00"] and rows[3][-1].startswith("yes")
    assert rows[3][4:6] == ["-", "-"]


def test_limited_api_check_tells_stable_abi_extensions_apart(tmp_path: Path):
    """gpu-pack packs build/native-X's extension as _native.abi3.so for the GPU machine's other
    Python only when it uses no private CPython symbol: the real one (cffi compiles against the
    limited API) passes, a library calling _PyObject_GC_New (private) does not."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc or not shutil.which("nm"):
        pytest.skip("needs cc and nm")
    gp = load_script("gpu-pack")
    for name, call in (("stable", "_Py_Dealloc(0); Py_IncRef(0);"), ("private", "_PyObject_GC_New(0);")):
        (tmp_path / f"{name}.c").write_text(f"void _Py_Dealloc(void *); void Py_IncRef(void *);\n"
                                            f"void *_PyObject_GC_New(void *);\nvoid f(void) {{ {call} }}\n")
        subprocess.run([cc, "-shared", "-fPIC", "-Wl,--allow-shlib-undefined", "-o", str(tmp_path / f"{name}.so"),
                        str(tmp_path / f"{name}.c")], check=True)
    assert gp.limited_api_only(tmp_path / "stable.so")
    assert not gp.limited_api_only(tmp_path / "private.so")
    built = sorted((REPO / "build").glob("native-*/_native*.so"))
    for ext in built:          # what scripts/setup built here, when it did
        assert gp.limited_api_only(ext), ext


def test_dry_run_pack_new_layer(tmp_path: Path):
    """--new-layer plans Debian 13's validation layer beside Debian 12's (layers-new/)."""
    gp = load_script("gpu-pack")
    ffdir = REPO / "build" / "ffmpeg"
    if not (ffdir / "bin" / "ffmpeg").exists():
        pytest.skip("no build/ffmpeg")
    import contextlib
    import io
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        assert gp.main(["--out", str(tmp_path / "g"), "--dry-run", "--new-layer", f"ff={ffdir}"]) == 0
    assert "layers-new/: vulkan-validationlayers of Debian trixie" in buf.getvalue()
    assert "mallstat/libmallstat.so, libpoolstat.so" in buf.getvalue()


def test_dry_run_cudacopy_step(pack: Path, tmp_path: Path):
    """Issue 33's A/B of the copy into CUDA memory: numpy, the shader copy, no copy (the
    decoder's own images), CUDA's copy from the decoder's images and the pump without a
    copy, each at 16 and 17 in flight
    (numpy at --in-flight and 17), in rounds on the first clip, then the summary over
    the rounds' JSON; --cudacopy-modes chooses other modes."""
    res = gpu_run("--pack", str(pack), "--dry-run", "--clips", "4k-422hq,4k-4444xq", "--cudacopy-rounds", "3",
                  "--bench-args", "--repeat 1 --in-flight 16", "cudacopy@ff10", out=tmp_path / "out")
    assert res.returncode == 0, res.stderr
    out = tmp_path / "out"
    assert f"step cudacopy ff10: timeout 240 s, log {out}/cudacopy-ff10.log" in res.stdout
    assert ("3 rounds: python3 tools/gpu/bench --ffmpeg " f"{pack}/ff10 --decbench {pack}/ff10/bin/decbench"
            in res.stdout)
    assert ("--clips 4k-422hq --modes py-stream-ed,py-stream-ed-t17,py-cuda-t16,py-cuda-t17,py-cuda-zc-t16,"
            "py-cuda-zc-t17,py-cuda-cucopy-t16,py-cuda-cucopy-t17,py-cuda-nocopy-t16,py-cuda-nocopy-t17 "
            f"--json {out}/cudacopy-ff10-rN.json --repeat 1 --in-flight 16" in res.stdout)
    assert "--cudacopy-summary" in res.stdout
    res = gpu_run("--pack", str(pack), "--dry-run", "--cudacopy-modes", "py-stream-ed,py-cuda-xfer-t16",
                  "cudacopy@ff10", out=tmp_path / "out2")
    assert res.returncode == 0, res.stderr
    assert "--modes py-stream-ed,py-cuda-xfer-t16 " in res.stdout
    bad = gpu_run("--pack", str(pack), "--dry-run", "--cudacopy-rounds", "0", "cudacopy")
    assert bad.returncode == 2 and "--cudacopy-rounds" in bad.stderr
    bad = gpu_run("--pack", str(pack), "--dry-run", "--cudacopy-modes", "py-cuda t16", "cudacopy")
    assert bad.returncode == 2 and "--cudacopy-modes" in bad.stderr
