"""Reports: JSON against its schema, the text table, and the PNG deviation map."""

from __future__ import annotations

import json
from pathlib import Path

import av
import numpy as np
import pytest

from pyprores.corpus import clips
from pyprores.decode.candidate import PyAVSession
from pyprores.check.compare import compare_file, summarize
from pyprores.check.devmap import GAP, unit_for
from pyprores.check.report import SCHEMA_PATH, map_paths, summary_json, summary_text, write_json, write_maps

SPECS = {s.name: s for s in clips.DEFAULT_CLIPS}


@pytest.fixture(scope="module")
def clip_paths(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("clips")
    return {s.name: clips.generate(ClipShort(s), d) for s in clips.DEFAULT_CLIPS}


def ClipShort(spec):  # two frames are enough here
    return clips.ClipSpec(**{**spec.__dict__, "frames": 2})


def perturb_luma(frame_index, frame):
    """Frame 1 gets +3 at luma (row 20, col 140): slice 3 of a 256-wide 4:2:2 frame."""
    if frame_index == 1:
        frame.planes["Y"][20, 140] += 3
    return frame


@pytest.fixture(scope="module")
def results(clip_paths):
    out = []
    for name, path in clip_paths.items():
        with PyAVSession(perturb=perturb_luma if name == "hq422" else None) as s:
            out.append(compare_file(path, s))
    return out


@pytest.fixture(scope="module")
def schema():
    """The schema's validator (only these tests need jsonschema)."""
    jsonschema = pytest.importorskip("jsonschema")
    doc = json.loads(SCHEMA_PATH.read_text())
    jsonschema.Draft202012Validator.check_schema(doc)
    return jsonschema.Draft202012Validator(doc)


def validate(doc, schema):
    schema.validate(doc)


def test_json_validates_and_carries_the_figures(results, schema, tmp_path):
    summary = summarize(results, max_dev=0)
    out = tmp_path / "r.json"
    write_json(summary, out)
    doc = json.loads(out.read_text())
    validate(doc, schema)
    assert doc["schema"] == "pyprores-compare/1" and doc["frames"] == 6
    assert doc["bitexact"] is False and doc["passed"] is False
    hq, alpha, inter = doc["files"]
    assert hq["bitexact"] is False and alpha["bitexact"] is True and inter["field_order"] == "tt"
    y = hq["planes"]["Y"]
    assert (y["max_abs"], y["mismatches"], y["identical"]) == (3, 1, False)
    assert y["psnr_db"] == pytest.approx(10 * np.log10(1023 ** 2 * 2 * 256 * 144 / 9))
    assert y["worst_slices"][0] | {"file": None} == {
        "file": None, "frame": 1, "picture": 0, "field": "frame", "slice": 3, "mb_x": 8, "mb_y": 1,
        "mb_count": 8, "x": 128, "y": 16, "width": 128, "height": 16, "row_step": 1, "max_abs": 3}
    assert sum(y["histogram"]["counts"]) == y["samples"]
    cb = hq["planes"]["Cb"]
    assert cb["identical"] is True and cb["psnr_db"] is None and cb["worst_slices"] == []
    assert set(alpha["planes"]) == {"Y", "Cb", "Cr", "A"} and alpha["pixel_format"] == "yuva444p12le"
    assert doc["total"]["planes"]["Y"]["mismatches"] == 1 and doc["total"]["max_abs"] == 3
    assert doc["total"]["planes"]["Y"]["worst_slices"][0]["file"].endswith("hq422.mov")


def test_json_passes_within_tolerance(results, schema):
    doc = summary_json(summarize(results, max_dev=3))
    validate(doc, schema)
    assert doc["passed"] is True and doc["bitexact"] is False


def test_schema_rejects_inf_and_inconsistent_identical(results, schema):
    doc = summary_json(summarize(results))
    bad = json.loads(json.dumps(doc))
    bad["files"][1]["planes"]["Y"]["psnr_db"] = 99.0          # identical but has a PSNR
    assert not schema.is_valid(bad)
    bad = json.loads(json.dumps(doc))
    bad["files"][0]["planes"]["Y"]["psnr_db"] = None            # differs but has no PSNR
    assert not schema.is_valid(bad)


def test_text_report(results):
    text = summary_text(summarize(results, max_dev=0))
    assert "hq422.mov" in text and "TOTAL: 3 file(s), 6 frame(s)" in text
    assert "FAIL: max deviation 3 > --max-dev 0" in text
    assert "frame 1, slice 3 at (128,16) 128x16" in text
    assert text.count("result: bit-exact") == 2 and "inf" in text


# -- PNG ----------------------------------------------------------------------------

def read_png(path: Path) -> np.ndarray:
    """The map as RGB, decoded by FFmpeg's PNG decoder (through PyAV)."""
    with av.open(str(path)) as container:
        assert container.streams.video[0].codec_context.name == "png"
        frame = next(container.decode(video=0))
    return frame.to_ndarray(format="rgb24")


@pytest.mark.parametrize("name", list(SPECS))
def test_map_has_the_slice_grid_aspect(results, tmp_path, name):
    r = next(r for r in results if Path(r.path).stem == name)
    spec = SPECS[name]
    [path] = write_maps(tmp_path / "map.png", [r])
    img = read_png(path)
    planes = len(r.planes)
    mb_w = (spec.width + 15) // 16
    mb_rows = 2 * ((spec.height + 31) // 32) if spec.interlaced else (spec.height + 15) // 16
    unit = unit_for(mb_w)
    panel_h = (img.shape[0] - GAP * (planes - 1)) // planes
    assert img.shape[1] == mb_w * unit and panel_h == mb_rows * unit
    assert img.shape[0] == planes * panel_h + GAP * (planes - 1)
    assert img.shape[1] / panel_h == pytest.approx(mb_w / mb_rows)


def test_map_colours_the_deviating_slice(results, tmp_path):
    r = results[0]                                   # hq422: +3 in slice 3 (row 1, right half)
    [path] = write_maps(tmp_path / "m.png", [r])
    img = read_png(path)
    unit = unit_for(16)
    inside = img[unit + unit // 2, 8 * unit + unit * 4]
    assert inside.any() and tuple(inside) != (48, 48, 48)
    assert not img[unit // 2, unit].any()            # an exact slice is black
    cb_top = 9 * unit + GAP                          # Cb panel: all exact
    assert not img[cb_top + unit + unit // 2, 8 * unit + unit * 4].any()


def test_map_paths_for_several_files(tmp_path, results):
    paths = map_paths(tmp_path / "dev.png", results)
    assert [p.name for p in paths] == ["dev-hq422.png", "dev-4444alpha.png", "dev-interlaced422.png"]
    assert map_paths(tmp_path / "dev.png", results[:1]) == [tmp_path / "dev.png"]
    twice = map_paths(tmp_path / "dev.png", [results[0], results[0]])
    assert len(set(twice)) == 2
