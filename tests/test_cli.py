"""The command line: exit codes, outputs, and one-line errors.

Most tests swap the native extension for a stand-in (``PyAVSession`` and the
pure-Python header parser), so they run wherever PyAV does; those marked
``native`` use the real extension and skip while it is not built.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import av
import numpy as np
import pytest

from conftest import write_mpeg4_mov

from pyprores import bitstream, cli
from pyprores.decode import candidate
from pyprores.corpus import clips
from pyprores.model import Frame

REPO = Path(__file__).resolve().parent.parent


def _native_or_none():
    try:
        return candidate.load_native()
    except Exception as e:  # NativeLibraryError, or anything the import raises
        return e


_NATIVE = _native_or_none()
native_only = pytest.mark.skipif(isinstance(_NATIVE, Exception),
                                 reason=f"pyprores.decode.native not usable: {_NATIVE}")


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("cliclips")
    for spec in clips.DEFAULT_CLIPS:
        clips.generate(clips.ClipSpec(**{**spec.__dict__, "frames": 3}), d)
    return d


@pytest.fixture
def hq(clip_dir) -> Path:
    return clip_dir / "hq422.mov"


def fake_native(monkeypatch, perturb=None):
    """Route the CLI's candidate to PyAV's software decoder (optionally perturbed)."""
    class Session(candidate.PyAVSession):
        def __init__(self, backend="vulkan", device=None, threads=0):
            super().__init__(backend=backend, device=device, threads=threads, perturb=perturb)

    fake = types.SimpleNamespace(Session=Session, inspect=bitstream.parse_frame)
    monkeypatch.setattr(candidate, "load_native", lambda: fake)


def off_by(delta: int, plane: str = "Y"):
    def perturb(n: int, frame: Frame) -> Frame:
        if n == 1:
            frame.planes[plane][5, 7] += delta
        return frame
    return perturb


def run(argv, capsys):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(err: str, *words: str):
    lines = err.strip().splitlines()
    assert len(lines) >= 1 and all(line.startswith("pyprores: error: ") for line in lines), err
    assert "Traceback" not in err
    for w in words:
        assert w in err, err


# -- exit codes ---------------------------------------------------------------------

def test_identical_exits_0(monkeypatch, capsys, hq):
    fake_native(monkeypatch)
    code, out, err = run(["compare", hq], capsys)
    assert code == 0 and "result: bit-exact" in out and err == ""


def test_deviation_over_max_dev_exits_1(monkeypatch, capsys, hq):
    fake_native(monkeypatch, off_by(3))
    code, out, _ = run(["compare", hq], capsys)
    assert code == 1 and "FAIL: max deviation 3 > --max-dev 0" in out
    code, out, _ = run(["compare", hq, "--max-dev", "3"], capsys)
    assert code == 0 and "within tolerance" in out
    code, _, _ = run(["compare", hq, "--max-dev", "2"], capsys)
    assert code == 1


def test_deviation_in_alpha_counts_too(monkeypatch, capsys, clip_dir):
    fake_native(monkeypatch, off_by(1, "A"))
    code, out, _ = run(["compare", clip_dir / "4444alpha.mov"], capsys)
    assert code == 1 and "\n  A " in out


def test_not_prores_exits_2(monkeypatch, capsys, tmp_path):
    fake_native(monkeypatch)
    text = tmp_path / "notes.txt"
    text.write_text("not a video\n")
    code, out, err = run(["compare", text], capsys)
    assert code == 2 and out == ""
    assert_one_line_error(err, "notes.txt")
    other = tmp_path / "mpeg4.mov"                 # a real video, but not ProRes
    write_mpeg4_mov(other)
    code, _, err = run(["compare", other], capsys)
    assert code == 2
    assert_one_line_error(err, "no ProRes video stream", "mpeg4")


def test_missing_file_exits_2(monkeypatch, capsys, tmp_path):
    fake_native(monkeypatch)
    code, _, err = run(["compare", tmp_path / "nope.mov"], capsys)
    assert code == 2
    assert_one_line_error(err, "nope.mov", "no such file")


def test_bad_file_among_good_ones_still_reports_the_good(monkeypatch, capsys, hq, tmp_path):
    fake_native(monkeypatch)
    code, out, err = run(["compare", tmp_path / "nope.mov", hq], capsys)
    assert code == 2 and "hq422.mov" in out
    assert_one_line_error(err, "nope.mov")


def test_bad_usage_exits_2(capsys):
    assert cli.main(["compare", "--max-dev", "-1"]) == 2
    assert cli.main(["frobnicate"]) == 2
    assert cli.main([]) == 2
    capsys.readouterr()


def test_truncated_file(monkeypatch, capsys, tmp_path):
    fake_native(monkeypatch)
    spec = clips.ClipSpec("cut", frames=4)
    full = tmp_path / "full"
    full.mkdir()
    with av.open(str(tmp_path / "cut.mov"), "w", options={"movflags": "+faststart"}) as out:
        with av.open(str(clips.generate(spec, full))) as src:
            s = out.add_stream_from_template(src.streams.video[0])
            for p in src.demux(src.streams.video[0]):
                if p.size:
                    p.stream = s
                    out.mux(p)
    data = (tmp_path / "cut.mov").read_bytes()
    (tmp_path / "cut.mov").write_bytes(data[: len(data) * 5 // 8])   # the index is up front
    code, _, err = run(["compare", tmp_path / "cut.mov"], capsys)
    assert code == 2
    assert_one_line_error(err, "ends early", "--frames 2")
    code, out, _ = run(["compare", tmp_path / "cut.mov", "--frames", "2"], capsys)
    assert code == 0 and "2 frame(s)" in out
    (tmp_path / "nomoov.mov").write_bytes((full / "cut.mov").read_bytes()[:20000])
    code, _, err = run(["compare", tmp_path / "nomoov.mov"], capsys)
    assert code == 2
    assert_one_line_error(err, "incomplete")


def test_missing_native_extension_exits_2(monkeypatch, capsys, hq):
    from pyprores.decode import native
    monkeypatch.setattr(native, "available", lambda: False)
    code, out, err = run(["compare", hq], capsys)
    assert code == 2 and out == ""
    assert_one_line_error(err, "native extension", "./scripts/setup")
    code, _, err = run(["inspect", hq], capsys)
    assert code == 2
    assert_one_line_error(err, "native extension")


# -- outputs ------------------------------------------------------------------------

def test_json_map_quiet_and_frames(monkeypatch, capsys, hq, tmp_path):
    fake_native(monkeypatch, off_by(2))
    code, out, err = run(["compare", hq, "--quiet", "--frames", "2", "--json", tmp_path / "r.json",
                          "--map", tmp_path / "m.png"], capsys)
    assert code == 1 and out == "" and err == ""
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["frames"] == 2 and doc["files"][0]["planes"]["Y"]["max_abs"] == 2
    assert (tmp_path / "m.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_json_to_stdout(monkeypatch, capsys, hq):
    fake_native(monkeypatch)
    code, out, _ = run(["compare", hq, "--json", "-"], capsys)
    assert code == 0 and json.loads(out)["bitexact"] is True


def test_default_clips(monkeypatch, capsys, tmp_path):
    fake_native(monkeypatch)
    code, out, _ = run(["compare", "--workdir", tmp_path, "--map", tmp_path / "map.png"], capsys)
    assert code == 0 and "TOTAL: 3 file(s), 12 frame(s)" in out
    names = {p.name for p in tmp_path.iterdir()}
    assert {"hq422.mov", "4444alpha.mov", "interlaced422.mov", "map-hq422.png"} <= names


def test_progress_bar_when_forced(monkeypatch, capsys, hq):
    fake_native(monkeypatch)
    code, _, err = run(["compare", hq, "--progress"], capsys)
    assert code == 0 and "hq422.mov [" in err and "3/3" in err


def test_inspect_text_and_json(monkeypatch, capsys, clip_dir):
    fake_native(monkeypatch)
    code, out, _ = run(["inspect", clip_dir / "interlaced422.mov", "--frame", "1"], capsys)
    assert code == 0
    assert "interlaced, top field first" in out and "picture 1 (bottom)" in out
    code, out, _ = run(["inspect", clip_dir / "4444alpha.mov", "--json"], capsys)
    doc = json.loads(out)
    info = doc["frame_info"]
    assert code == 0 and info["chroma_format"] == "444" and info["alpha"] is True
    assert [s["mb_count"] for s in info["pictures"][0]["slices"][:4]] == [8, 4, 2, 1]
    code, _, err = run(["inspect", clip_dir / "hq422.mov", "--frame", "9"], capsys)
    assert code == 2
    assert_one_line_error(err, "has 3 frame(s)")


def test_python_dash_m(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    res = subprocess.run([sys.executable, "-m", "pyprores", "compare", tmp_path / "none.mov"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 2 and res.stderr.startswith("pyprores: error: ")
    assert "Traceback" not in res.stderr


# -- with the real native extension ------------------------------------------------

@native_only
def test_native_inspect_agrees_with_python_parser(clip_dir):
    for path in sorted(clip_dir.glob("*.mov")):
        with av.open(str(path)) as c:
            tag = c.streams.video[0].codec_context.codec_tag
            for p in c.demux(video=0):
                if p.size:
                    assert _NATIVE.inspect(bytes(p), tag) == bitstream.parse_frame(bytes(p), tag), path


@native_only
def test_native_software_backend_is_bitexact(capsys, clip_dir):
    code, out, err = run(["compare", "--backend", "software", *sorted(clip_dir.glob("*.mov"))], capsys)
    assert code == 0, err
    assert "TOTAL: 3 file(s)" in out and out.count("result: bit-exact") == 4


@native_only
def test_native_inspect_command(capsys, hq):
    code, out, _ = run(["inspect", hq, "--json"], capsys)
    assert code == 0 and json.loads(out)["frame_info"]["pix_fmt"] == "yuv422p10le"


@native_only
def test_vulkan_without_hwaccel_is_a_one_line_error(capsys, hq):
    if _NATIVE.has_hwaccel("vulkan"):
        pytest.skip("this FFmpeg build has the Vulkan hwaccel (the vulkan run is a slow test)")
    code, _, err = run(["compare", hq], capsys)
    assert code == 2
    assert_one_line_error(err, "Vulkan")


@native_only
@pytest.mark.slow
def test_vulkan_default_clips_are_bitexact(capsys, tmp_path):
    if not _NATIVE.has_hwaccel("vulkan"):
        pytest.skip("this FFmpeg build has no ProRes Vulkan hwaccel")
    code, out, err = run(["compare", "--workdir", tmp_path], capsys)
    assert code == 0, out + err


def test_candidate_decode_failure_names_file_and_frame(monkeypatch, capsys, hq):
    from pyprores.errors import DecodeError

    def broken(n, frame):
        if n == 2:
            raise DecodeError("slice 3: bad codeword")
        return frame
    fake_native(monkeypatch, broken)
    code, _, err = run(["compare", hq], capsys)
    assert code == 2
    assert_one_line_error(err, "hq422.mov, frame 2", "bad codeword")


def test_no_device_stops_at_once(monkeypatch, capsys, hq):
    from pyprores.errors import DeviceError

    def no_device(*a, **k):
        raise DeviceError("no Vulkan device found; install mesa-vulkan-drivers")
    monkeypatch.setattr(candidate, "load_native",
                        lambda: types.SimpleNamespace(Session=no_device, inspect=bitstream.parse_frame))
    code, out, err = run(["compare", hq, hq], capsys)
    assert code == 2 and out == ""
    assert_one_line_error(err, "no Vulkan device")
    assert err.count("\n") == 1
