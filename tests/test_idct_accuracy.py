"""IEEE 1180-1990 IDCT accuracy of FFmpeg's ProRes decoders (pyprores.idct.accuracy).

A CI-sized run (1,000 blocks per range and sign instead of 10,000) through
the real decoders: FFmpeg's software decoder and the Vulkan hwaccel must
agree exactly, and both must equal the model of FFmpeg's arithmetic. The
limits FFmpeg meets are asserted as limits; those it fails are asserted as
the values it measures (they are properties of FFmpeg's IDCT, documented in
docs/CONFORMANCE.md, not of our port): at 10 bits the overall mean square
error is about 0.026 (limit 0.02); at 12 bits every mean square and mean
error limit fails, with a systematic bias of about -1/16 of a sample.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from pyprores.idct import accuracy as A
from pyprores.decode import native
from pyprores.cli import main
from pyprores.idct.model import clip_range, prores_idct, reference_fdct, reference_idct, reference_put

HAS_EXT = native.available()
HAS_VK = HAS_EXT and native.has_hwaccel("vulkan")
CI_BLOCKS = 1000


# ---------------------------------------------------------------- the procedure itself

def test_ieee_generator():
    """randx = 1103515245 * 1 + 12345 = 1103527590; 1103527590 / (2^31 - 1) * 512
    = 263.1...: the first number of the L=256, H=255 run is 263 - 256 = 7."""
    i = A.ieee_random_indices(3)
    assert i[0] == 1103527590
    assert A.ieee_blocks(1, 256, 255)[0, 0, 0] == 7
    b = A.ieee_blocks(2000, 256, 255)
    assert b.min() == -256 and b.max() == 255
    assert np.array_equal(A.ieee_blocks(5, 5, 5, -1), -A.ieee_blocks(5, 5, 5))
    small = A.ieee_blocks(2000, 5, 5)
    assert small.min() == -5 and small.max() == 5


@pytest.mark.parametrize("bd", [10, 12])
def test_scaled_coefficients(bd):
    k = 1 << (bd - 9)
    f = A.test_coefficients(500, 300, 300, 1, bd)
    assert f.min() >= -2048 * k and f.max() <= 2048 * k - 1
    # the dequantised coefficients fit FFmpeg's int16 block
    assert np.abs(f * (1 << (12 - bd))).max() <= 16384


def test_reference():
    x = np.random.default_rng(0).normal(size=(4, 8, 8))
    assert np.allclose(reference_idct(reference_fdct(x)), x)
    for bd in (10, 12):
        assert (reference_put(np.zeros((1, 8, 8)), bd) == 1 << (bd - 1)).all()
        dc = np.zeros((1, 8, 8))
        dc[0, 0, 0] = 8 * 100 * (1 << (12 - bd))              # a flat block of +100
        assert (reference_put(dc, bd) == (1 << (bd - 1)) + 100).all()
        assert clip_range(bd) == (4, (1 << bd) - 5)


def test_12_bit_bias_comes_from_w4(monkeypatch):
    """The 12-bit column pass computes W4 * (row + 8192 + 2) >> 17 with
    W4 = 32767, not 2^15: output = floor(row * 0.24999 + 2048.4375) where an
    exact transform gives floor(row / 4 + 2048.5), so some outputs come out
    one too low. Far from the clip limits the mean error is about -0.05 (not
    quite -1/16: the pre-rounding values sit on a coarse grid); with W4 = 2^15
    it vanishes. The 10-bit constants are exact (W4 = 2^14): no bias."""
    import pyprores.idct.model as M

    assert (8192 + (1 << 16) // 32767) * 32767 / 2 ** 17 == pytest.approx(2048.4375, abs=1e-4)
    rng = np.random.default_rng(7)
    samples = rng.integers(-1000, 1001, size=(20000, 8, 8))      # no clipping at 12 bits

    def mean_error(bd):
        f = np.floor(reference_fdct(samples * (1 << (bd - 9)) // 8) + 0.5).astype(np.int64)
        d = f * (1 << (12 - bd))
        return float((prores_idct(d, bd) - reference_put(d, bd)).mean())

    assert -0.06 < mean_error(12) < -0.045
    assert abs(mean_error(10)) < 0.002
    w = list(M.CONSTANTS[12]["W"])
    w[4] = 32768
    monkeypatch.setitem(M.CONSTANTS, 12, dict(M.CONSTANTS[12], W=tuple(w)))
    assert abs(mean_error(12)) < 0.003


# ---------------------------------------------------------------- through the decoders

@pytest.fixture(scope="module")
def report():
    if not HAS_EXT:
        pytest.skip("native extension not built (./scripts/setup)")
    backends = ("software", "vulkan") if HAS_VK else ("software",)
    # without the validation layer (see tests/test_writer.py's vk fixture): under it
    # each new pipeline variant takes minutes to create on lavapipe
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYPRORES_VALIDATION", "0")
        return A.run(blocks=CI_BLOCKS, backends=backends)


def test_backends_agree_exactly(report):
    if not HAS_VK:
        pytest.skip("this FFmpeg build has no prores_vulkan hwaccel: only the software decoder ran")
    assert report.backends == ["software", "vulkan"]
    for r in report.results:
        assert r.mismatches == {"vulkan": 0}, f"{r.bit_depth}-bit {r.label}: Vulkan differs from software"
    assert report.backends_agree


def test_decoders_equal_the_model(report):
    """Every decoded sample (test blocks and zero blocks) equals the model of
    FFmpeg's C IDCT: the numbers below are FFmpeg's, not an artefact of the
    bitstream."""
    for r in report.results:
        assert all(v == 0 for v in r.model_mismatches.values()), (r.bit_depth, r.label, r.model_mismatches)


def test_report_per_limit(report, record_property, capsys):
    text = A.format_text(report)
    record_property("idct_accuracy", text)
    with capsys.disabled():
        print("\n" + text)
    assert len(report.results) == 12 and all(r.blocks == CI_BLOCKS for r in report.results)


@pytest.mark.parametrize("bd", [10, 12])
def test_limits_met(report, bd):
    """Peak error <= 1 and zero in -> zero out hold for both depths; at 10 bits
    also both mean error limits and the per-position mean square error."""
    met = {10: ("peak", "pixel_mse", "pixel_mean", "overall_mean", "zero"), 12: ("peak", "zero")}[bd]
    for r in (r for r in report.results if r.bit_depth == bd):
        checks = {n: (v, lim, ok) for n, v, lim, ok in r.checks()}
        for name in met:
            assert checks[name][2], f"{bd}-bit {r.label}: {name} = {checks[name][0]} > {checks[name][1]}"
        assert r.peak == 1 and r.zero_ok and r.zero_blocks > 0


def test_limits_failed_10_bit(report):
    """10 bits: the overall mean square error is about 0.022-0.027 (limit 0.02)
    in every run: the row pass stores (a + b) >> 15 in int16, 4 fractional
    bits of the output (1/16 sample)."""
    for r in (r for r in report.results if r.bit_depth == 10):
        assert 0.02 < r.overall_mse < 0.03, r.label
        assert not dict((n, ok) for n, _, _, ok in r.checks())["overall_mse"]
    assert report.limit_summary(10)["overall_mse"] == (pytest.approx(0.0270, abs=1e-4), False)


def test_limits_failed_12_bit(report):
    """12 bits: mean error about -0.05 (limit 0.0015 in magnitude) from the
    W4 = 32767 bias; mean square error about 0.12-0.14 overall (limit 0.02)
    and 0.12-0.22 at the worst position (0.06): the row pass keeps only 2
    fractional bits of the output."""
    for r in (r for r in report.results if r.bit_depth == 12):
        assert -0.06 < r.overall_mean < -0.04, r.label
        assert 0.11 < r.overall_mse < 0.145, r.label
        assert 0.12 < r.pixel_mse < 0.25, r.label
        assert 0.05 < r.pixel_mean < 0.15, r.label
    s = report.limit_summary(12)
    assert [n for n, (_, ok) in s.items() if not ok] == ["pixel_mse", "overall_mse", "pixel_mean",
                                                         "overall_mean"]


# ---------------------------------------------------------------- CLI

@pytest.mark.skipif(not HAS_EXT, reason="native extension not built (./scripts/setup)")
def test_cli(tmp_path, capsys):
    out = tmp_path / "acc.json"
    rc = main(["idct-accuracy", "--blocks", "64", "--backend", "software", "--bit-depth", "10",
               "--json", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "IEEE 1180" in text and "L=300 H=300 negated" in text and "10-bit: fails:" in text
    doc = json.loads(out.read_text())
    assert doc["blocks"] == 64 and len(doc["results"]) == 6 and doc["backends"] == ["software"]
    assert doc["command"] == "pyprores idct-accuracy --blocks 64 --bit-depth 10 --backend software"
    assert set(doc["results"][0]["checks"]) == {"peak", "pixel_mse", "overall_mse", "pixel_mean",
                                                 "overall_mean", "zero"}
    # --strict: the limits FFmpeg fails make it exit 1
    assert main(["idct-accuracy", "--blocks", "64", "--backend", "software", "--bit-depth", "12",
                 "--strict", "--json", "-"]) == 1
    assert json.loads(capsys.readouterr().out)["passed"] is False
