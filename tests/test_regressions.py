"""Every input in tests/data/regressions/ through both decoders (issue 8).

Each input is a ProRes packet (``.bin``) that once crashed, hung, or made the
Vulkan validation layer complain; ``index.json`` says its codec tag, which
backends it concerns, the packets to decode before it in the same session
(``before``, for state-dependent bugs), how often to repeat the sequence, and
the outcomes allowed (``ok``, ``corrupt``: decoded and flagged damaged,
``error``: a clean error code; ``expect_before`` for the ``before`` packets,
else the same) and, under ``concealed``, the slices each
backend must report concealed ([picture, slice] pairs: issue 19, both
decoders flag damaged frames alike). Decoding runs in the fuzzer's child workers,
so a crash or hang fails the test instead of the suite.

Entries of ``kind: stream`` are container files decoded as one stream by the
build's ffmpeg (one decoder context for every frame, which csrc sessions do
not give: they reopen on a size change); their Vulkan frames must equal the
software decoder's.

``status: open`` marks a decoder bug reported but not fixed yet, on the
backends listed in ``open_on``: the test runs and is an expected failure
(XPASS once fixed: then set the status to ``fixed``, and the test guards
against its return).

``on_ffmpeg`` holds what differs on another FFmpeg release, by major.minor
version: its keys replace the entry's when the build under test is that
release (``PYPRORES_BUILD=9.0.2``; ``tests/test_builds.py`` runs this module
on that build). A master build (``PYPRORES_BUILD=master``, version
``master-<commit>``) takes the overrides of 9.0: master's ``proresdec.c``, which
decides what a damaged picture gives, is 9.0's.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from pyprores import fuzz
from pyprores.decode import native

DATA = Path(__file__).resolve().parent / "data" / "regressions"
HAS_VK = native.available() and native.has_hwaccel("vulkan")
FFMPEG_VERSION = native.build_info().get("version", "") if native.available() else ""
# What a build of FFmpeg master behaves as, where the overrides are concerned
MASTER_AS_RELEASE = "9.0"


def release_under_test() -> str:
    """major.minor... of the FFmpeg under test (a master build: the release it behaves as)."""
    if FFMPEG_VERSION.startswith("master-"):
        return MASTER_AS_RELEASE + ".master"
    return FFMPEG_VERSION


def for_this_build(entry: dict) -> dict:
    """The entry with the ``on_ffmpeg`` overrides of the FFmpeg release under test."""
    for version, override in entry.get("on_ffmpeg", {}).items():
        if release_under_test().startswith(version + "."):
            return {**entry, **override}
    return entry


ENTRIES = [for_this_build(e) for e in fuzz.load_regressions(DATA)]
VALIDATE = os.environ.get("PYPRORES_VALIDATION") == "1"


def _cases(kind: str = "packet"):
    for e in ENTRIES:
        if e.get("kind", "packet") != kind:
            continue
        for backend in e.get("backends", fuzz.BACKENDS):
            marks = []
            if backend == "vulkan" and not HAS_VK:
                marks.append(pytest.mark.skip(reason="this FFmpeg build has no prores_vulkan hwaccel"))
            if e.get("status") == "open" and backend in e.get("open_on", fuzz.BACKENDS):
                marks.append(pytest.mark.xfail(reason=f"open decoder bug: {e['description'][:160]}",
                                               strict=False))
            yield pytest.param(e, backend, id=f"{Path(e['file']).stem}-{backend}", marks=marks)


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    """One worker per (backend, validation), shared by the module; a crash
    or hang restarts it on the next request."""
    logdir = tmp_path_factory.mktemp("regression-workers")
    opened: dict[tuple[str, bool], fuzz.Worker] = {}

    def get(backend: str, validation: bool) -> fuzz.Worker:
        key = (backend, validation and backend == "vulkan" and VALIDATE)
        if key not in opened:
            opened[key] = fuzz.Worker(backend, None, logdir, key[1], startup_timeout=300)
        return opened[key]

    yield get
    for w in opened.values():
        w.stop()


def test_index_is_well_formed():
    assert ENTRIES, f"{DATA}/index.json lists no input"
    names = set()
    for e in ENTRIES:
        assert e["file"] not in names, f"{e['file']} listed twice"
        names.add(e["file"])
        for step in [*e.get("before", []), e]:
            assert (DATA / step["file"]).is_file(), f"{step['file']} is missing"
            assert len(step["codec_tag"]) == 4, step
        assert e.get("status") in ("open", "fixed"), e["file"]
        assert e.get("description") and e.get("found_by"), e["file"]
        for backend in e.get("backends", fuzz.BACKENDS):
            assert backend in fuzz.BACKENDS
            assert set(e["expect"][backend]) <= set(fuzz.CLEAN), e["file"]
        for backend, outcomes in e.get("expect_before", {}).items():
            assert e.get("before") and backend in e.get("backends", fuzz.BACKENDS), e["file"]
            assert set(outcomes) <= set(fuzz.CLEAN), e["file"]
        for backend, slices in e.get("concealed", {}).items():
            assert backend in e.get("backends", fuzz.BACKENDS), e["file"]
            assert all(len(x) == 2 for x in slices), e["file"]
        for version, override in e.get("on_ffmpeg", {}).items():
            assert re.fullmatch(r"\d+\.\d+", version), (e["file"], version)
            assert set(override) <= {"expect", "concealed", "why"}, (e["file"], version)


@pytest.mark.parametrize("entry,backend", list(_cases()))
def test_regression_input(workers, entry, backend):
    w = workers(backend, entry.get("validation", True))
    replies = fuzz.run_regression(entry, DATA, w, timeout=120)
    allowed = entry["expect"][backend]
    allowed_before = entry.get("expect_before", {}).get(backend, allowed)
    steps = len(entry.get("before", [])) + 1
    last = replies[-1]
    assert last.status not in ("crash", "hang"), (
        f"{entry['file']} on {backend}: {last.status} after {len(replies)} decodes "
        f"(signal {last.signal}): {last.message[:400]}")
    bad = [(i, r.status, r.message[:120]) for i, r in enumerate(replies)
           if r.status not in (allowed if (i + 1) % steps == 0 else allowed_before)]
    assert not bad, f"{entry['file']} on {backend}: outcomes outside {allowed}: {bad[:3]}"
    messages = [m for r in replies for m in r.validation]
    assert not messages, f"{entry['file']} on {backend}: validation messages: {messages[:3]}"
    reports = [m for r in replies for m in r.sanitizer]
    assert not reports, f"{entry['file']} on {backend}: sanitizer reports: {reports[:3]}"
    if backend in entry.get("concealed", {}):
        assert sorted(map(list, last.concealed or [])) == sorted(entry["concealed"][backend]), (
            f"{entry['file']} on {backend}: concealed slices {last.concealed}, "
            f"expected {entry['concealed'][backend]}")


def _framemd5(ffmpeg: Path, path: Path, vulkan: bool) -> list[str]:
    """Per-frame MD5s of the decoded frames at their own size (no rescaling)."""
    hw = ["-init_hw_device", "vulkan=vk:0", "-hwaccel", "vulkan", "-hwaccel_output_format", "vulkan"]
    vf = ["-vf", "hwdownload,format=yuv422p10le"] if vulkan else []
    res = subprocess.run([str(ffmpeg), "-hide_banner", "-v", "error", *(hw if vulkan else []), "-i", str(path),
                          *vf, "-noautoscale", "-f", "framemd5", "-"], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr[-1500:]
    return [line.split(",")[-1].strip() for line in res.stdout.splitlines() if line and line[0] != "#"]


@pytest.mark.parametrize("entry,backend", list(_cases("stream")))
def test_regression_stream(ffmpeg_bin, entry, backend):
    """A whole stream through one decoder context (the ffmpeg command line):
    the Vulkan frames must equal the software decoder's, twice in a row."""
    path = DATA / entry["file"]
    want = _framemd5(ffmpeg_bin, path, vulkan=False)
    assert len(want) >= 2
    for _ in range(2):
        assert _framemd5(ffmpeg_bin, path, vulkan=True) == want, entry["file"]
