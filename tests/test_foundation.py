"""The foundation: tarball, patch series, FFmpeg build, Vulkan, package import."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest
from conftest import validation_errors, validation_requested, vulkan_env

PATCHES_ROOT = Path(__file__).resolve().parent.parent / "ffmpeg_patches"
PATCH_DIR = PATCHES_ROOT / "7.1.5"
# Every series: ffmpeg_patches/<version>/ with its tarball's checksum and its build link.
SERIES_BUILDS = {"7.1.5": "ffmpeg", "9.0.2": "ffmpeg-9.0.2", "master": "ffmpeg-master"}


def checksum_file(version: str) -> Path:
    """The series' tarball checksum: ffmpeg-<release>.tar.xz.sha256, or for master the
    git archive of the commit it applies to (ffmpeg-master-<commit>.tar.xz.sha256)."""
    files = sorted((PATCHES_ROOT / version).glob("ffmpeg-*.tar.xz.sha256"))
    assert len(files) == 1, (version, files)
    return files[0]


def series(version: str = "7.1.5") -> list[str]:
    path = PATCHES_ROOT / version / "series"
    if not path.is_file():
        return []
    names = []
    for line in path.read_text().splitlines():
        fields = line.split("#", 1)[0].split()
        if fields:
            names.append(fields[0])
    return names


def test_series_layout():
    """ffmpeg_patches/ holds one folder per FFmpeg release, each with its series file
    and its tarball's checksum; setup and the tests know every one of them."""
    versions = sorted(d.name for d in PATCHES_ROOT.iterdir() if d.is_dir())
    assert versions == sorted(SERIES_BUILDS)
    assert not list(PATCHES_ROOT.glob("*.patch")) and not (PATCHES_ROOT / "series").exists()
    for v in versions:
        assert (PATCHES_ROOT / v / "series").is_file(), v
        sha, name = checksum_file(v).read_text().split()[:2]
        assert name == checksum_file(v).name.removesuffix(".sha256") and len(sha) == 64, v
        assert name == f"ffmpeg-{v}.tar.xz" or (v == "master" and name.startswith("ffmpeg-master-")), v
        for p in series(v):
            assert (PATCHES_ROOT / v / p).is_file(), (v, p)


@pytest.mark.parametrize("version", sorted(SERIES_BUILDS))
def test_checksum_file_matches_tarball(version: str, ffmpeg_tarball: Path):
    expected, name = checksum_file(version).read_text().split()[:2]
    tarball = ffmpeg_tarball.parent / name
    if not tarball.is_file():
        pytest.skip(f"no {name} beside {ffmpeg_tarball}")
    assert hashlib.sha256(tarball.read_bytes()).hexdigest() == expected


@pytest.mark.parametrize("version", sorted(SERIES_BUILDS))
def test_series_applies_to_pristine_tarball(version: str, repo_root: Path, ffmpeg_tarball: Path,
                                            tmp_path: Path):
    src = tmp_path / "ffmpeg"
    env = dict(os.environ, PYPRORES_FFMPEG_TARBALL=str(ffmpeg_tarball))
    res = subprocess.run([str(repo_root / "scripts" / "setup"), "--quiet", "--series", version,
                          "--apply-only", str(src)],
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    log = subprocess.run(["git", "-C", str(src), "log", "--format=%s"],
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert len(log) == 1 + len(series(version))
    assert log[-1] == f"FFmpeg {version} (pristine tarball)"
    assert (src / "configure").is_file()


def test_cover_letter_matches_series():
    """The cover letter is filled in (no format-patch placeholders) and lists the
    patches of ffmpeg_patches/7.1.5/series: its subject count and shortlog agree."""
    letter = (PATCH_DIR / "0000-cover-letter.patch").read_text()
    assert "*** SUBJECT HERE ***" not in letter and "*** BLURB HERE ***" not in letter
    n = len(series())
    assert f"[PATCH 00/{n}]" in letter
    assert f"pyprores developers ({n}):" in letter
    for name in series():
        first = (PATCH_DIR / name).read_text()
        subject = first.split("Subject: ", 1)[1].split("] ", 1)[1].split("\n")[0]
        assert subject[:40] in letter, name


def all_series_patches() -> list[Path]:
    """Every patch listed in a series file of ffmpeg_patches/<version>/."""
    out = []
    for series_file in sorted(PATCH_DIR.parent.glob("*/series")):
        for line in series_file.read_text().splitlines():
            fields = line.split("#", 1)[0].split()
            if fields:
                out.append(series_file.parent / fields[0])
    return out


def test_every_patch_signed_off():
    """Each patch of each series carries a Signed-off-by trailer (FFmpeg requires one)."""
    patches = all_series_patches()
    assert patches
    for patch in patches:
        message = patch.read_text().split("\n---\n", 1)[0]
        assert "\nSigned-off-by: pyprores developers <dev@pyprores.invalid>" in message, patch.name


@pytest.mark.parametrize("version", sorted(SERIES_BUILDS))
def test_check_series_rejects_unsigned_patch(version: str, repo_root: Path, tmp_path: Path):
    """scripts/check-series fails (exit 1, before building anything) on a patch
    without Signed-off-by, in either series."""
    if not series(version):
        pytest.skip(f"ffmpeg_patches/{version}/series is empty")
    src = PATCHES_ROOT / version / series(version)[-1]
    text = src.read_text()
    assert "Signed-off-by:" in text
    (tmp_path / src.name).write_text(
        "".join(l for l in text.splitlines(True) if not l.startswith("Signed-off-by:")))
    (tmp_path / "series").write_text(src.name + "\n")
    env = dict(os.environ, PYPRORES_CACHE=str(tmp_path / "cache"))
    res = subprocess.run([str(repo_root / "scripts" / "check-series"), "--series", version,
                          "--patches", str(tmp_path)],
                         capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 1, res.stderr
    assert "has no Signed-off-by" in res.stderr and src.name in res.stderr


@pytest.mark.parametrize("version", sorted(SERIES_BUILDS))
def test_build_matches_series(version: str, repo_root: Path):
    """build/ffmpeg (7.1.5) and build/ffmpeg-9.0.2 were built from the current series
    (else: run ./scripts/setup [--series 9.0.2]; ./scripts/test runs both)."""
    ffmpeg_dir = repo_root / "build" / SERIES_BUILDS[version]
    if not ffmpeg_dir.exists() and os.environ.get("PYPRORES_FFMPEG_DIR"):
        pytest.skip(f"no build/{SERIES_BUILDS[version]}: the suite runs on an external build")
    for rel in ("bin/ffmpeg", "bin/ffprobe", "lib/libavcodec.so", "lib/pkgconfig/libavcodec.pc",
                "include/libavcodec/avcodec.h", ".pyprores-stamp", "BUILDINFO"):
        assert (ffmpeg_dir / rel).exists(), rel
    info = (ffmpeg_dir / "BUILDINFO").read_text().splitlines()
    built = info[info.index("patches:") + 1:info.index("configure:")]
    assert [p.strip() for p in built] == series(version), \
        f"{ffmpeg_dir} is stale for ffmpeg_patches/{version}/series: run ./scripts/setup --series {version}"
    assert f"series: {version}" in info or version == "7.1.5"


def test_vulkan_hwupload_roundtrip(run_ffmpeg):
    res = run_ffmpeg("-hide_banner", "-init_hw_device", "vulkan=vk:0",
                     "-f", "lavfi", "-i", "testsrc2=s=64x64:d=0.1",
                     "-vf", "format=yuv420p,hwupload,hwdownload,format=yuv420p",
                     "-f", "null", "-", timeout=120)
    assert "frame=" in res.stderr


def test_validation_layer_enabled(run_ffmpeg):
    """PYPRORES_VALIDATION=1 + validate=True really loads VK_LAYER_KHRONOS_validation."""
    if not validation_requested():
        pytest.skip("PYPRORES_VALIDATION is not 1")
    env = dict(vulkan_env(validate=True), VK_LOADER_DEBUG="layer")
    res = run_ffmpeg("-hide_banner", "-init_hw_device", "vulkan=vk:0",
                     "-f", "lavfi", "-i", "color=s=16x16:d=0.04", "-f", "null", "-",
                     env=env, timeout=120)
    assert 'Insert instance layer "VK_LAYER_KHRONOS_validation"' in res.stderr
    assert validation_errors(res.stderr) == []


def test_import_pyprores():
    import pyprores

    assert pyprores.__version__


def test_setup_rejects_unknown_series(repo_root: Path):
    res = subprocess.run([str(repo_root / "scripts" / "setup"), "--series", "6.1",
                          "--apply-only", "/nonexistent"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert "unknown series '6.1'" in res.stderr and "7.1.5" in res.stderr and "9.0.2" in res.stderr
