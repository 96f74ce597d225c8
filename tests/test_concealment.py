"""Damaged slices are reported alike by both decoders (issue 19).

The software decoder flags a frame (``decode_error_flags``) when some of its
slices fail to decode and refuses it when every slice of a picture does;
since patch 19 of the 7.1.5 series (patch 12 of the 9.0.2 series) the Vulkan
hwaccel does the same, from the status its shaders record per slice, when
error detection is asked for (``-err_detect
bitstream`` and the like: the frame then waits for the GPU before it is
returned, which is why it is not the default). Here: the ffmpeg command
line with frame threads and each ``-err_detect`` mode, ``pyprores.decode.native``'s per-slice report on
both backends, and ``pyprores compare``, which leaves slices both decoders
concealed out of its figures. ``tests/test_regressions.py`` runs the
``conceal-*`` inputs (one per failure class) through both backends, and the
fuzzer's CI run checks that both flag the same mutants
(``test_fuzz.py::test_ci_run_damage_agreement``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pyprores.decode import demux, native
from pyprores.cli import main
from pyprores.errors import DecodeError

HW_GPU = ["-init_hw_device", "vulkan=vk:0", "-hwaccel", "vulkan", "-hwaccel_output_format", "vulkan"]
FAILED = "slices failed to decode, concealed"
HAS_VK = native.available() and native.has_hwaccel("vulkan")
needs_vk = pytest.mark.skipif(not HAS_VK, reason="this FFmpeg build has no prores_vulkan hwaccel")


@pytest.fixture(scope="module")
def damaged(tmp_path_factory, ffmpeg_bin) -> dict:
    """A 3-frame 128x64 HQ clip whose first frame has slice 3's luma damaged
    (an AC run past the slice's blocks), made by patching the packet's bytes
    in the file (same length, so the container stays valid)."""
    import subprocess
    d = tmp_path_factory.mktemp("concealment")
    clean = d / "clean.mov"
    subprocess.run([str(ffmpeg_bin), "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=s=128x64:r=25:d=0.12",
                    "-pix_fmt", "yuv422p10le", "-c:v", "prores_ks", "-profile:v", "3", str(clean)], check=True)
    with demux.open(clean) as src:
        packet = next(iter(src.packets()))
    info = native.inspect(packet, "apch")
    sl = info.pictures[0].slices[3]
    bad = bytearray(packet)
    start = sl.offset + (bad[sl.offset] >> 3)
    bad[start:start + 6] = b"\xff" * 6
    movie = clean.read_bytes()
    at = movie.find(packet)
    assert at > 0
    path = d / "damaged.mov"
    path.write_bytes(movie[:at] + bytes(bad) + movie[at + len(packet):])
    return {"path": path, "packet": bytes(bad), "slice": [0, 3]}


def _run(run_ffmpeg, path: Path, *opts: str, vulkan: bool = True, level: str = "warning"):
    hw = HW_GPU if vulkan else []
    vf = ["-vf", "hwdownload,format=yuv422p10le"] if vulkan else []
    res = run_ffmpeg("-hide_banner", "-nostdin", "-v", level, *opts, *hw, "-i", path, *vf,
                     "-f", "framemd5", "-", check=False, timeout=300)
    frames = [line.split(",")[-1].strip() for line in res.stdout.splitlines() if line and line[0] != "#"]
    return res, frames


@needs_vk
def test_ffmpeg_flags_the_damaged_frame_like_software(run_ffmpeg, damaged):
    """Frame threads (ffmpeg's default): the damaged frame, and only it, is
    reported corrupt by both decoders; the undamaged frames are identical."""
    sw, sw_frames = _run(run_ffmpeg, damaged["path"], vulkan=False)
    vk, vk_frames = _run(run_ffmpeg, damaged["path"], "-err_detect", "bitstream")
    assert sw.returncode == vk.returncode == 0, vk.stderr[-2000:]
    assert len(sw_frames) == len(vk_frames) == 3
    assert sw_frames[1:] == vk_frames[1:]
    assert sw.stderr.count("corrupt decoded frame") == 1, sw.stderr
    assert vk.stderr.count("corrupt decoded frame") == 1, vk.stderr
    assert f"1 {FAILED}" in vk.stderr


@needs_vk
def test_ffmpeg_logs_each_concealed_slice_at_debug_level(run_ffmpeg, damaged):
    res, _ = _run(run_ffmpeg, damaged["path"], "-threads", "1", "-err_detect", "careful", level="debug")
    assert "concealed slice 3 of picture 0" in res.stderr
    assert res.stderr.count("concealed slice ") == 1


@needs_vk
@pytest.mark.parametrize("opts", [(), ("-err_detect", "bitstream+ignore_err")])
def test_no_report_by_default_or_with_ignore_err(run_ffmpeg, damaged, opts):
    """Without error detection (or with ignore_err) frames are returned
    without waiting for the GPU, so a slice that fails there goes unflagged;
    the pixels are the same."""
    res, frames = _run(run_ffmpeg, damaged["path"], *opts)
    _, reported = _run(run_ffmpeg, damaged["path"], "-err_detect", "bitstream")
    assert res.returncode == 0 and frames == reported and len(frames) == 3
    assert FAILED not in res.stderr and "corrupt decoded frame" not in res.stderr


@needs_vk
def test_explode_flags_the_damaged_frame_like_software(run_ffmpeg, damaged):
    """explode makes no difference to the software ProRes decoder, which
    outputs a frame that lost some slices, flagged; neither does it to the
    hwaccel (issue 35: it used to refuse such frames)."""
    sw, sw_frames = _run(run_ffmpeg, damaged["path"], "-threads", "1", "-err_detect", "explode", vulkan=False)
    vk, vk_frames = _run(run_ffmpeg, damaged["path"], "-err_detect", "explode")
    assert len(sw_frames) == len(vk_frames) == 3, vk.stderr[-2000:]
    assert sw.stderr.count("corrupt decoded frame") == vk.stderr.count("corrupt decoded frame") == 1
    assert "Invalid data found" not in vk.stderr


@pytest.mark.parametrize("backend", ["software", pytest.param("vulkan", marks=needs_vk)])
def test_native_session_lists_the_concealed_slice(damaged, backend):
    with native.Session(backend) as s:
        frame = s.decode(damaged["packet"], "apch")
        assert frame.corrupt and frame.error_flags == 1      # FF_DECODE_ERROR_INVALID_BITSTREAM
        assert [list(c) for c in frame.concealed] == [damaged["slice"]]
        assert s.concealed_slices() == frame.concealed
        clean = s.decode(demux_packet(damaged["path"], 1), "apch")
        assert not clean.corrupt and clean.error_flags == 0 and clean.concealed == ()
        assert s.concealed_slices() == ()


def demux_packet(path: Path, n: int) -> bytes:
    with demux.open(path) as src:
        for i, p in enumerate(src.packets()):
            if i == n:
                return p
    raise IndexError(n)


def test_software_concealed_slice_keeps_the_prefill(damaged):
    """The software backend finds failed slices by prefilling its frames with
    0xffff, which no decoded sample takes: a concealed slice keeps it."""
    with native.Session("software") as s:
        frame = s.decode(damaged["packet"], "apch")
    y = frame.planes["Y"]
    assert (y[48:64] == 0xFFFF).all() and (y[:48] < 1024).all()


@needs_vk
def test_compare_reports_and_excludes_slices_both_concealed(damaged, tmp_path, capsys):
    out = tmp_path / "report.json"
    assert main(["compare", str(damaged["path"]), "--json", str(out), "--quiet"]) == 0
    doc = json.loads(out.read_text())
    f = doc["files"][0]
    assert f["bitexact"] and f["passed"] and f["concealment_agrees"]
    assert f["concealed"] == [{"frame": 0, "reference_flagged": True, "candidate_flagged": True,
                               "reference_slices": [damaged["slice"]],
                               "candidate_slices": [damaged["slice"]],
                               "excluded_slices": [damaged["slice"]]}]
    assert any("frame 0 is damaged" in n for n in f["notes"])


@needs_vk
def test_inspect_decode_names_the_decoders_that_concealed(damaged, capsys):
    assert main(["inspect", str(damaged["path"]), "--decode", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    for backend in ("software", "vulkan"):
        assert doc["decoders"][backend]["status"] == "corrupt"
        assert doc["decoders"][backend]["concealed"] == [damaged["slice"]]
    assert main(["inspect", str(damaged["path"]), "--decode"]) == 0
    text = capsys.readouterr().out
    assert "software,vulkan" in text and "concealed by" in text


def test_whole_picture_failure_is_an_error_on_both(tmp_path):
    """Every slice damaged: the software decoder refuses the frame, and so does
    the hwaccel (not a frame of concealment)."""
    data = (Path(__file__).parent / "data" / "regressions" / "conceal-all-hq422-72x40.bin").read_bytes()
    backends = ["software"] + (["vulkan"] if HAS_VK else [])
    for backend in backends:
        with native.Session(backend) as s, pytest.raises(DecodeError):
            s.decode(data, "apch")
