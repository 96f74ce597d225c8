"""tools/gpu/gpu-pack and tools/gpu/gpu-run (docs/GPU.md): argument parsing, the dry run, and the
ELF runpath rewrite that makes a packed build run from wherever it lands. Fast: no GPU, no
FFmpeg build needed."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import load_script

REPO = Path(__file__).resolve().parent.parent
GPU_RUN = REPO / "tools" / "gpu" / "gpu-run"
GPU_PACK = REPO / "tools" / "gpu" / "gpu-pack"


@pytest.fixture
def pack(tmp_path: Path) -> Path:
    """A packed directory as tools/gpu/gpu-pack leaves it, with stub executables."""
    root = tmp_path / "gpu"
    for name in ("ff13", "ff10"):
        (root / name / "bin").mkdir(parents=True)
        (root / name / "lib").mkdir()
        for exe in ("ffmpeg", "ffprobe", "decbench"):
            p = root / name / "bin" / exe
            p.write_text("#!/bin/sh\nexit 1\n")
            p.chmod(0o755)
        (root / name / "BUILDINFO").write_text("key: abc\npatches:\n  0001-x.patch\nconfigure:\n")
    (root / "MANIFEST").write_text("ff13\tabc\t18 patches\nff10\tdef\t16 patches\n")
    return root


def gpu_run(*args: str, out: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    if out is not None:
        env["OUT"] = str(out)
    return subprocess.run(["bash", str(GPU_RUN), *args], capture_output=True, text=True, env=env, timeout=60)


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
                 "load@B[,B...]", "soak@B", "refusals@B"):
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


def test_run_unpacks_xz_builds(pack: Path):
    """gpu-pack --xz leaves the builds in builds.tar.xz: gpu-run unpacks it before planning."""
    import tarfile
    with tarfile.open(pack / "builds.tar.xz", "w:xz") as tar:
        for name in ("ff13", "ff10"):
            tar.add(pack / name, arcname=name)
            shutil.rmtree(pack / name)
    res = gpu_run("--pack", str(pack), "--dry-run", "check@ff10")
    assert res.returncode == 0, res.stderr
    assert "step check ff10" in res.stdout
    assert (pack / "ff10" / "bin" / "ffmpeg").is_file() and not (pack / "builds.tar.xz").exists()


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
