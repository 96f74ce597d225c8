"""Other FFmpeg builds: pyprores.builds, csrc/build_ffi.py --out-dir, --build NAME,
and the quick corpus on the FFmpeg 9.0.2 and master builds.

The 9.0.2 build is build/ffmpeg-9.0.2 (an FFmpeg install) plus build/native-9.0.2
(the extension compiled against it: csrc/build_ffi.py --ffmpeg-dir build/ffmpeg-9.0.2
--out-dir build/native-9.0.2). Without it these tests skip, except under CI ($CI set)
or with PYPRORES_REQUIRE_BUILDS=1, where a missing build fails. The master build
(build/ffmpeg-master, build/native-master: the pull-request topics of
ffmpeg_patches/master/ on FFmpeg master) gets the same tests. Other names:
PYPRORES_TEST_BUILD=NAME[,NAME...].

Bit-exactness is required of a build with a patch series (its BUILDINFO lists
patches). Pristine 9.0.2 is not bit-exact (its IDCT is floating point): there the
bit-exact test is an expected failure, strict, so it reports the day it passes.
Damaged-slice tests (tests/test_slice_isolation.py and the like) do not run on
other builds: pristine 9.0.2 may crash lavapipe on them. The exception is issue 19's
reporting of damaged slices, which the 9.0.2 series has too (its patch "report slices
that failed to decode"): with it, tests/test_concealment.py and
tests/test_regressions.py run on the other build as well, and a fuzz run checks that
both decoders flag the same mutants as damaged.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pyprores import builds

REPO = Path(__file__).resolve().parent.parent
BUILDS = os.environ.get("PYPRORES_TEST_BUILD", "9.0.2,master").split(",")
# What each build's ffmpeg -version starts with (master: named after its tarball by setup).
VERSION_PREFIX = {"9.0.2": "9.0", "master": "master-"}


def _required() -> bool:
    return bool(os.environ.get("CI")) or os.environ.get("PYPRORES_REQUIRE_BUILDS") == "1"


def cli(*args, env_extra=None, timeout=900) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop(builds.ENV_BUILD, None)
    env.pop(builds.ENV_NATIVE_DIR, None)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "pyprores", *map(str, args)], capture_output=True,
                          text=True, timeout=timeout, cwd=REPO, env=env)


def py(code: str, env_extra=None, timeout=300) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop(builds.ENV_BUILD, None)
    env.pop(builds.ENV_NATIVE_DIR, None)
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env=env)


@pytest.fixture(scope="module", params=BUILDS)
def other_build(request) -> dict:
    """BUILDINFO.json of build/native-BUILD (skip, or fail under CI, without it), with
    the build's name under "name"."""
    BUILD = request.param
    ffdir, ndir = builds.ffmpeg_dir(BUILD), builds.native_dir(BUILD)
    missing = [str(p) for p in (ffdir / "bin" / "ffmpeg", ndir / "BUILDINFO.json") if not p.exists()]
    if missing:
        msg = (f"FFmpeg build {BUILD} is missing ({', '.join(missing)}): scripts/setup builds it, or "
               f"link build/ffmpeg-{BUILD} to an install and run csrc/build_ffi.py --ffmpeg-dir "
               f"build/ffmpeg-{BUILD} --out-dir build/native-{BUILD}")
        if _required():
            pytest.fail(msg)
        pytest.skip(msg)
    return dict(builds.read_native_info(ndir), name=BUILD)


# -- selection, without any other build -------------------------------------------

def test_buildinfo_is_parsed():
    text = ("key: abc\nbuilt: 2026-11-25T21:58:56Z on x86_64\nmode: minimal asan=0\npatches:\n"
            "  0001-a.patch\n  0002-b.patch\nconfigure:\n  --prefix=/x\n  --enable-vulkan\n")
    info = builds.parse_buildinfo(text)
    assert info["key"] == "abc" and info["mode"] == "minimal asan=0"
    assert info["patches"] == ["0001-a.patch", "0002-b.patch"]
    assert info["configure"] == ["--prefix=/x", "--enable-vulkan"]
    assert builds.parse_buildinfo("patches:\nconfigure:\n")["patches"] == []


def test_selection_and_directories(monkeypatch):
    monkeypatch.delenv(builds.ENV_NATIVE_DIR, raising=False)
    monkeypatch.delenv(builds.ENV_BUILD, raising=False)
    monkeypatch.setenv(builds.ENV_FFMPEG_DIR, "/somewhere/ffmpeg")
    assert builds.selected() is None and builds.native_dir() is None
    assert builds.ffmpeg_dir() == Path("/somewhere/ffmpeg")     # the default, as before
    for name in ("", "default"):
        monkeypatch.setenv(builds.ENV_BUILD, name)
        assert builds.selected() is None and builds.native_dir() is None
    monkeypatch.setenv(builds.ENV_BUILD, "9.0.2")               # a name wins over the default's dir
    assert builds.ffmpeg_dir() == REPO / "build" / "ffmpeg-9.0.2"
    assert builds.native_dir() == REPO / "build" / "native-9.0.2"
    monkeypatch.setenv(builds.ENV_NATIVE_DIR, "/x/native-foo")
    assert builds.native_dir() == Path("/x/native-foo")
    with pytest.raises(ValueError):
        builds.ffmpeg_dir("../etc")


def test_cli_refuses_a_missing_build():
    res = cli("--build", "no-such-build", "compare")
    assert res.returncode == 2, res.stderr
    assert "pyprores: error: build no-such-build" in res.stderr and "Traceback" not in res.stderr
    res = cli("compare", "--build", "no-such-build")                 # after the command too
    assert res.returncode == 2 and "no-such-build" in res.stderr


def test_build_ffi_out_dir(tmp_path, ffmpeg_dir):
    """--ffmpeg-dir/--out-dir writes the extension and BUILDINFO.json; PYPRORES_NATIVE_DIR
    loads it, and build_info() reports the build it was compiled against (the build
    under test: build/ffmpeg, or build/ffmpeg-NAME with PYPRORES_BUILD=NAME)."""
    out = tmp_path / "native-x"
    res = subprocess.run([sys.executable, str(REPO / "csrc" / "build_ffi.py"), "--ffmpeg-dir", str(ffmpeg_dir),
                          "--out-dir", str(out)], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert res.returncode == 0, res.stderr[-2000:]
    info = json.loads((out / "BUILDINFO.json").read_text())
    assert Path(info["ffmpeg_dir"]).resolve() == ffmpeg_dir.resolve()
    version = subprocess.run([str(ffmpeg_dir / "bin" / "ffmpeg"), "-hide_banner", "-version"],
                             capture_output=True, text=True, check=True).stdout.split()[2]
    major = {"7.1": "61", "9.0": "63"}[version[:3]]
    assert info["ffmpeg_version"] == version and info["libavcodec"].split(".")[0] == major
    assert info["series"] == builds.read_ffmpeg_info(ffmpeg_dir)["patches"]
    assert (out / info["extension"]).is_file()
    res = py("import json; from pyprores.decode import native; print(json.dumps(native.build_info()))",
             env_extra={builds.ENV_NATIVE_DIR: str(out)})
    assert res.returncode == 0, res.stderr[-2000:]
    got = json.loads(res.stdout)
    assert got["build"] == "native-x" and got["version"] == version
    assert got["libavcodec"].split(".")[0] == major and got["series"] == info["series"]


def test_compare_report_names_the_default_build(tmp_path):
    out = tmp_path / "r.json"
    # without the validation layer: Debian 12's stalls 10 s per frame freed here (conftest.py)
    res = cli("compare", "--json", out, "--workdir", tmp_path / "clips", "--quiet",
              env_extra={"PYPRORES_VALIDATION": "0"})
    assert res.returncode == 0, res.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["ffmpeg"]["build"] == "default" and doc["ffmpeg"]["libavcodec"].startswith("61.")
    assert doc["ffmpeg"]["series"], doc["ffmpeg"]


# -- the other build ------------------------------------------------------------------

def test_build_info_of_the_other_build(other_build):
    BUILD = other_build["name"]
    major = int(other_build["libavcodec"].split(".")[0])
    assert other_build["ffmpeg_version"].startswith(VERSION_PREFIX.get(BUILD, "")) and major == 63, \
        other_build
    res = py("import json; from pyprores.decode import native; print(json.dumps(native.build_info())); "
             "s = native.Session('vulkan'); print(json.dumps([s.device_name, s.validation_enabled, s.note]))",
             env_extra={builds.ENV_BUILD: BUILD})
    assert res.returncode == 0, res.stderr[-2000:]
    lines = res.stdout.splitlines()
    info, (device, validation, note) = json.loads(lines[0]), json.loads(lines[1])
    assert info["build"] == BUILD and info["libavcodec"].startswith("63.")
    assert info["series"] == other_build["series"]
    if os.environ.get("PYPRORES_VALIDATION") == "1" and not validation:
        # the one case where validation is dropped, and then the session says why
        assert "VK_EXT_host_image_copy" in note, note


def test_compare_on_the_other_build(other_build, tmp_path):
    """pyprores --build NAME compare: the default clips decode, and the report says which build."""
    BUILD = other_build["name"]
    out = tmp_path / "r.json"
    res = cli("--build", BUILD, "compare", "--json", out, "--workdir", tmp_path / "clips", "--quiet")
    assert res.returncode in (0, 1), res.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["ffmpeg"]["build"] == BUILD
    assert doc["ffmpeg"]["version"].startswith(VERSION_PREFIX.get(BUILD, ""))
    assert all(f["frames"] > 0 for f in doc["files"]) and len(doc["files"]) == 3
    if other_build["series"]:
        assert res.returncode == 0 and doc["bitexact"], [(f["file"], f["max_abs"]) for f in doc["files"]]


@pytest.fixture(scope="module")
def quick_run(other_build, tmp_path_factory) -> dict:
    """The quick corpus encoded by the other build's ffmpeg and checked on it
    (pyprores --build NAME corpus/conformance); the conformance table's rows."""
    BUILD = other_build["name"]
    d = tmp_path_factory.mktemp(f"corpus-quick-{BUILD}")
    res = cli("--build", BUILD, "corpus", d, "--quick", "--no-progress")
    assert res.returncode == 0, res.stderr[-3000:]
    table = d / "conformance.md"
    res = cli("--build", BUILD, "conformance", d / "manifest.json", "--out", table, "--no-progress",
              timeout=1800)
    assert res.returncode in (0, 1), res.stdout[-2000:] + res.stderr[-3000:]
    text = table.read_text()
    rows = [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in text.splitlines() if line.startswith("| ") and not line.startswith("| clip ")]
    doc = json.loads((d / "manifest.json").read_text())
    return {"rc": res.returncode, "text": text, "rows": rows, "manifest": doc, "build": BUILD}


def test_quick_corpus_decodes_on_the_other_build(quick_run):
    """Every clip decodes on the Vulkan path with every frame, no error, and the
    build's software decoder agrees with the reference (the manifest's MD5s)."""
    text, rows, doc = quick_run["text"], quick_run["rows"], quick_run["manifest"]
    assert f"FFmpeg build: {quick_run['build']}" in text
    assert len(rows) == len(doc["clips"]) > 100
    assert "Errors:" not in text, text[text.index("Errors:"):][:3000]
    for r in rows:
        assert not r[2].startswith("**"), f"{r[0]}: frames {r[2]}"
        assert "software" not in r[8], f"{r[0]}: the software decoder differs from the manifest ({r[8]})"


def test_quick_corpus_bitexact_on_the_other_build(quick_run, other_build, request):
    if not other_build["series"]:
        request.applymarker(pytest.mark.xfail(
            strict=True, reason=f"FFmpeg {other_build['name']} without a patch series is not bit-exact "
                                "(floating-point IDCT); the series makes it so"))
    bad = [(r[0], r[3:7]) for r in quick_run["rows"] if r[7] != "yes"]
    assert not bad, f"{len(bad)}/{len(quick_run['rows'])} clips not bit-exact, e.g. {bad[:5]}"
    assert quick_run["rc"] == 0


# -- damaged slices (issue 19) on the other build ------------------------------------

REPORTS = "report-slices-that-failed-to-deco"


def _reports_damage(info: dict) -> bool:
    """Does the build's series have the hwaccel report the slices that failed?"""
    return any(REPORTS in p for p in info["series"])


def test_concealment_tests_pass_on_the_other_build(other_build):
    """tests/test_concealment.py (the ffmpeg command line with each -err_detect mode and
    frame threads, both backends' per-slice reports, compare and inspect),
    tests/test_regressions.py (the conceal-* inputs with the slices each backend must
    name) and tests/test_refusals.py (the refuse-* streams: frames out, flagged and
    refused as by the software decoder) on the other build, as on the default."""
    BUILD = other_build["name"]
    if not _reports_damage(other_build):
        pytest.skip(f"the series of build {BUILD} does not report damaged slices")
    env = dict(os.environ)
    env.pop(builds.ENV_NATIVE_DIR, None)
    env[builds.ENV_BUILD] = BUILD
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "tests/test_concealment.py", "tests/test_regressions.py", "tests/test_refusals.py"],
                         capture_output=True, text=True, timeout=900, cwd=REPO, env=env)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert " passed" in res.stdout and " skipped" not in res.stdout, res.stdout[-2000:]


CROP_VULKAN = "crop-Vulkan-frames-with-crop_v"


def test_clean_aperture_tests_pass_on_the_other_build(other_build):
    """tests/test_clean_aperture.py (the container's clean aperture on GPU-resident frames:
    ffmpeg inserts crop_vulkan, the picture equals software decoding's; issue 32) on the
    other build, for a series that has it (the master series' topic 6-crop)."""
    BUILD = other_build["name"]
    if not any(CROP_VULKAN in p for p in other_build["series"]):
        pytest.skip(f"the series of build {BUILD} does not crop Vulkan frames")
    env = dict(os.environ)
    env.pop(builds.ENV_NATIVE_DIR, None)
    env[builds.ENV_BUILD] = BUILD
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "tests/test_clean_aperture.py"],
                         capture_output=True, text=True, timeout=900, cwd=REPO, env=env)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    assert " passed" in res.stdout and " failed" not in res.stdout, res.stdout[-2000:]


def test_fuzz_damage_agreement_on_the_other_build(other_build, tmp_path):
    """pyprores --build NAME fuzz: no crash or hang (9.0.2 patch 13: a frame that failed
    once crashed the next one, finding 9 of docs/ROBUSTNESS.md), both decoders call the
    same mutants damaged, and name the same concealed slices where both flag a frame."""
    BUILD = other_build["name"]
    if not _reports_damage(other_build):
        pytest.skip(f"the series of build {BUILD} does not report damaged slices")
    count = 300
    res = cli("--build", BUILD, "fuzz", "--count", count, "--seed", 19, "--no-validation",
              "--no-progress", "--out", tmp_path / "run")
    assert res.returncode in (0, 1), res.stderr[-3000:]
    doc = json.loads((tmp_path / "run.json").read_text())
    d, findings = doc["damage"], doc["findings"]
    assert res.returncode == 0, [(f["kind"], f["backend"], f["index"], f["message"][:100]) for f in findings][:5]
    assert d["checked"] >= count * 9 // 10, d
    assert d.get("disagree", 0) == 0, [f for f in findings if f["kind"] == "damage"][:5]
    assert d["slice_sets_checked"] >= count // 10, d
    assert d["slice_sets_equal"] == d["slice_sets_checked"], \
        [f for f in findings if f["kind"] == "slices"][:5]
