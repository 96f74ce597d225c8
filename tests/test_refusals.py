"""The Vulkan path outputs, flags and refuses the frames the software decoder
does (issue 35).

Each ``kind: refusals`` entry of ``tests/data/regressions/index.json`` is a
stream made by ``tests/tools/make_refusal_streams.py``: one damaged frame per
way FFmpeg's ``proresdec.c`` refuses (or flags) a frame, each followed by an
intact frame. ``frames`` says what the software decoder with one thread does
with each (the reference; frame threads lose flags, an FFmpeg bug), and for
the damage found only by decoding slices (``found: gpu``) that the hwaccel
can only know it once the GPU is done.

The ffmpeg command line decodes each stream (``tests/tools/compare_refusals.py``)
with the software decoder and with the Vulkan hwaccel (frame threads, frames
downloaded), with ``-err_detect`` asking for every detection and without it:

- every detection flag: the same frames out, the same frames flagged
  (``corrupt decoded frame``), the same refused, the same picture-level
  errors logged, and the intact frames bit-exact;
- without error detection (ffmpeg's default): the same for everything found
  while parsing headers; a frame whose slices fail on the GPU is output
  unflagged, as documented (patch 19 of the 7.1.5 series and patch 12 of
  the 9.0.2 series report only when error detection is asked for, since the
  frame must then wait for the GPU).

On the 7.1.5 series before issue 35, the hwaccel path output (flagged) the
pictures whose slice index the software decoder refuses, and with
``explode`` refused frames the software decoder outputs flagged: both fail
here. ``tests/test_builds.py`` runs this module on the 9.0.2 build too.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from pyprores import fuzz
from pyprores.decode import native

DATA = Path(__file__).resolve().parent / "data" / "regressions"
TOOLS = Path(__file__).resolve().parent / "tools"
HAS_VK = native.available() and native.has_hwaccel("vulkan")
ENTRIES = [e for e in fuzz.load_regressions(DATA) if e.get("kind") == "refusals"]


def _tool():
    spec = importlib.util.spec_from_file_location("compare_refusals", TOOLS / "compare_refusals.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module          # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


cr = _tool()


@pytest.fixture(scope="module")
def runs(ffmpeg_bin):
    """(file, decoder) -> compare_refusals.Run, decoded once per module."""
    cache: dict = {}

    def get(entry: dict, decoder: str):
        key = (entry["file"], decoder)
        if key not in cache:
            path = DATA / entry["file"]
            pts = cr.packet_pts(path)
            assert len(pts) == len(entry["frames"]), entry["file"]
            if decoder == "software":
                cache[key] = cr.decode(ffmpeg_bin, path, pts, vulkan=False)
            else:
                cache[key] = cr.decode(ffmpeg_bin, path, pts, vulkan=True, mode=decoder)
        return cache[key]

    return get


def _ids(e: dict) -> str:
    return Path(e["file"]).stem


def test_entries_are_well_formed():
    assert len(ENTRIES) >= 3
    for e in ENTRIES:
        assert all(f["software"] in fuzz.CLEAN and f["found"] in ("cpu", "gpu") for f in e["frames"]), e["file"]
        assert e["frames"][0]["damage"] == "none"
        kinds = {f["software"] for f in e["frames"]}
        assert kinds == {"ok", "corrupt", "error"}, (e["file"], kinds)


@pytest.mark.parametrize("entry", ENTRIES, ids=_ids)
def test_software_decoder_does_what_each_damage_targets(runs, entry):
    """The generator's damages hit the paths they are named for: the software
    decoder with one thread outputs, flags and refuses the frames as listed,
    and logs each listed message."""
    sw = runs(entry, "software")
    want = [f["software"] for f in entry["frames"]]
    bad = [(i, f["damage"], w, g) for i, (f, w, g) in enumerate(zip(entry["frames"], want, sw.outcomes)) if w != g]
    assert not bad, f"{entry['file']}: (frame, damage, listed, software): {bad}\n{sw.stderr_tail}"
    missing = [(f["damage"], f["message"]) for f in entry["frames"] if f.get("message", "") not in sw.stderr]
    assert not missing, f"{entry['file']}: messages not logged: {missing}"


@pytest.mark.skipif(not HAS_VK, reason="this FFmpeg build has no prores_vulkan hwaccel")
@pytest.mark.parametrize("entry", ENTRIES, ids=_ids)
def test_vulkan_outputs_flags_and_refuses_like_software(runs, entry):
    """-err_detect with every detection flag (explode included): the same
    frames out, flagged and refused, the same picture errors, the intact
    frames bit-exact."""
    sw, vk = runs(entry, "software"), runs(entry, "all")
    content = [f.get("content", True) for f in entry["frames"]]
    diff = cr.differences(sw, vk, content)
    named = [f"{d} ({entry['frames'][int(d.split()[1].rstrip(':'))]['damage']})" if d.startswith("frame ") else d
             for d in diff]
    assert not named, f"{entry['file']}: {named}\nvulkan stderr tail:\n{vk.stderr_tail}"


@pytest.mark.skipif(not HAS_VK, reason="this FFmpeg build has no prores_vulkan hwaccel")
@pytest.mark.parametrize("entry", ENTRIES, ids=_ids)
def test_vulkan_without_error_detection(runs, entry):
    """ffmpeg's default (no -err_detect): what proresdec.c finds in the
    headers is refused alike; a frame whose slices fail on the GPU comes out
    unflagged, as the hwaccel's documentation says."""
    sw, vk = runs(entry, "software"), runs(entry, "default")
    assert sw.errors == vk.errors, (entry["file"], sw.errors, vk.errors)
    for i, f in enumerate(entry["frames"]):
        want = sw.outcomes[i] if f["found"] == "cpu" else "ok"
        assert vk.outcomes[i] == want, (entry["file"], i, f["damage"], sw.outcomes[i], vk.outcomes[i])
        if want == "ok" == sw.outcomes[i] and f.get("content", True):
            assert vk.md5[i] == sw.md5[i], (entry["file"], i, f["damage"])
