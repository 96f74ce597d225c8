"""The conformance corpus and its checks (issue 6): ``pyprores corpus``,
``pyprores conformance`` and tools/gpu/conformance-gpu.

The quick corpus (about 180 tiny clips) is generated and checked here on
lavapipe, end to end through the command line: Vulkan vs software, bit-exact,
against the manifest's software MD5s. The full corpus is the GPU machine's
(tools/gpu/conformance-gpu); here only its recipes are checked, and it is
generated and run in a slow test.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT
from pyprores.corpus import conformance
from pyprores import corpus
from pyprores.corpus.clips import Recipe

CLI = [sys.executable, "-m", "pyprores"]
TABLE_HEADER = ["clip", "variant", "frames", "max abs dev Y", "Cb", "Cr", "A", "bit-exact",
                "framemd5 vs manifest", "device"]


def cli(*args, env_extra=None, timeout=600) -> subprocess.CompletedProcess:
    # No validation layer for the corpus run: Debian 12's layer stalls 10 s per plane each
    # time a decoder's frame pool is freed (tests/conftest.py); test_hwaccel.py validates.
    env = dict(os.environ, PYPRORES_VALIDATION="0", **(env_extra or {}))
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          cwd=str(REPO_ROOT), env=env)


def table_rows(markdown: str) -> list[list[str]]:
    """Data rows of the conformance table, as lists of cells."""
    rows = [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in markdown.splitlines() if line.startswith("|")]
    assert rows and rows[0] == TABLE_HEADER, rows[:1]
    assert set(rows[1]) == {"---"}
    return rows[2:]


@pytest.fixture(scope="module")
def quick_corpus(tmp_path_factory, ffmpeg_dir) -> Path:
    d = tmp_path_factory.mktemp("corpus-quick")
    res = cli("corpus", d, "--quick", "--ffmpeg", ffmpeg_dir, "--no-progress")
    assert res.returncode == 0, res.stderr
    assert re.match(r"\d+ clips, \d+ frames: ", res.stdout), res.stdout
    return d


# ---------------------------------------------------------------------------- corpus

def test_quick_manifest_is_well_formed(quick_corpus, ffmpeg_dir):
    doc = json.loads((quick_corpus / "manifest.json").read_text())
    assert corpus.manifest_problems(doc) == []
    assert doc["mode"] == "quick" and doc["command"].startswith("pyprores corpus ")
    assert doc["ffmpeg"]["version"] == corpus.ffmpeg_version(ffmpeg_dir / "bin" / "ffmpeg")
    assert doc["ffmpeg"]["version"].startswith(("ffmpeg version 7.1", "ffmpeg version 9.0"))
    recipes = corpus.quick_recipes()
    assert [c["name"] for c in doc["clips"]] == [r.name for r in recipes]
    for clip, recipe in zip(doc["clips"], recipes):
        assert Recipe(**clip["params"]) == recipe
        assert (quick_corpus / clip["file"]).stat().st_size == clip["bytes"] > 0
        assert clip["pix_fmt"] == recipe.decoded_pix_fmt
        assert clip["codec_tag"] == recipe.codec_tag
        assert clip["frames"] == recipe.frames == len(clip["framemd5"])
        assert (clip["width"], clip["height"]) == (recipe.width, recipe.height)
        expect_order = {"progressive": "progressive", "tff": "tb", "bff": "bt"}[recipe.scan]
        assert clip["field_order"] == expect_order, clip["name"]
        assert clip["ffmpeg_args"][-1] == clip["file"]
    # frames of a clip differ (temporal noise / moving content), except flat content
    moving = [c for c in doc["clips"] if c["frames"] > 1 and c["params"]["content"] != "flat"]
    assert moving and all(len(set(c["framemd5"])) == c["frames"] for c in moving)


def test_manifest_md5_is_ffmpeg_framemd5(quick_corpus, ffmpeg_dir):
    """conformance.frame_md5 of a decoded frame == the framemd5 muxer's hash
    (422 10-bit, 444 12-bit, 4444 + alpha 12-bit)."""
    from pyprores.decode import demux
    doc = corpus.load_manifest(quick_corpus)
    picked = {}
    for c in doc["clips"]:
        picked.setdefault(c["pix_fmt"], c)
    assert set(picked) == {"yuv422p10le", "yuv444p12le", "yuva444p12le"}
    for fmt, c in picked.items():
        again = corpus.framemd5(ffmpeg_dir / "bin" / "ffmpeg", quick_corpus / c["file"], fmt)
        assert again == c["framemd5"]
        with demux.open(quick_corpus / c["file"]) as src:
            assert [conformance.frame_md5(f) for f in src.reference_frames()] == c["framemd5"], fmt


def test_conformance_quick_corpus_bitexact(quick_corpus, tmp_path):
    out = tmp_path / "CONFORMANCE.md"
    out.write_text("# Conformance\n\nintro kept\n\n" + conformance.BEGIN + "\nold\n" + conformance.END
                   + "\n\n## NVIDIA section kept\n")
    res = cli("conformance", quick_corpus / "manifest.json", "--out", out, "--no-progress")
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads((quick_corpus / "manifest.json").read_text())
    n = len(doc["clips"])
    assert f"{n}/{n} clips bit-exact on " in res.stdout
    text = out.read_text()
    assert text.startswith("# Conformance\n\nintro kept\n\n" + conformance.BEGIN)
    assert text.rstrip().endswith("## NVIDIA section kept") and "\nold\n" not in text
    assert f"**{n}/{n} clips bit-exact**" in text
    rows = table_rows(text)
    assert [r[0] for r in rows] == [c["name"] for c in doc["clips"]]
    for row, clip in zip(rows, doc["clips"]):
        assert len(row) == len(TABLE_HEADER)
        assert row[2] == str(clip["frames"])
        planes = row[3:7] if "yuva" in clip["pix_fmt"] else row[3:6]
        assert planes == ["0"] * len(planes) and (row[6] == "–" or "yuva" in clip["pix_fmt"])
        assert row[7] == "yes" and row[8] == "match"
        assert row[9] and row[9] != "cpu"


def test_conformance_prints_table_without_out(quick_corpus, tmp_path):
    """Without --out the section goes to stdout; a subset manifest works too."""
    doc = json.loads((quick_corpus / "manifest.json").read_text())
    doc["clips"] = [c for c in doc["clips"] if c["params"]["alpha_bits"] == 16][:3]
    for c in doc["clips"]:
        os.symlink(quick_corpus / c["file"], tmp_path / c["file"])
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    res = cli("conformance", tmp_path, "--no-progress")
    assert res.returncode == 0, res.stderr
    rows = table_rows(res.stdout)
    assert len(rows) == 3 and all(r[6] == "0" for r in rows)


def test_conformance_table_is_the_same_one_frame_per_call(quick_corpus, tmp_path):
    """Frames in flight (the default) and --in-flight 1 give the same rows, on a
    subset with every pixel format and scan (two-frame clips among them)."""
    doc = json.loads((quick_corpus / "manifest.json").read_text())
    picked: dict = {}
    for c in doc["clips"]:
        picked.setdefault((c["pix_fmt"], c["params"]["scan"], c["frames"] > 1), c)
    doc["clips"] = list(picked.values())
    for c in doc["clips"]:
        os.symlink(quick_corpus / c["file"], tmp_path / c["file"])
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    tables = []
    for extra in ([], ["--in-flight", "1"]):
        res = cli("conformance", tmp_path, "--no-progress", *extra)
        assert res.returncode == 0, res.stderr
        tables.append(table_rows(res.stdout))
    assert tables[0] == tables[1] and len(tables[0]) == len(picked) >= 10
    assert "--in-flight 1" in res.stdout      # the command line says so


def test_conformance_fails_on_manifest_mismatch(quick_corpus, tmp_path):
    """A manifest MD5 that the decoders do not reproduce: exit 1, named in the table."""
    doc = json.loads((quick_corpus / "manifest.json").read_text())
    doc["clips"] = doc["clips"][:2]
    for c in doc["clips"]:
        os.symlink(quick_corpus / c["file"], tmp_path / c["file"])
    doc["clips"][1]["framemd5"][0] = "0" * 32
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    res = cli("conformance", tmp_path / "manifest.json", "--out", tmp_path / "c.md", "--no-progress")
    assert res.returncode == 1, res.stdout + res.stderr
    rows = table_rows((tmp_path / "c.md").read_text())
    assert rows[0][7] == "yes" and rows[0][8] == "match"
    assert rows[1][7] == "**NO**" and "differs: software, vulkan (frame 0)" in rows[1][8]
    assert "1/2 clips bit-exact" in res.stdout


def test_conformance_reports_plane_deviation(quick_corpus):
    """A candidate that is off by 3 in one Cr sample: not bit-exact, max abs 3 in Cr only."""
    from pyprores.decode.candidate import PyAVSession

    def perturb(n, frame):
        if n == 0:
            frame.planes["Cr"][1, 2] += 3
        return frame

    session = PyAVSession(perturb=perturb)
    doc = corpus.load_manifest(quick_corpus)
    name = next(c["name"] for c in doc["clips"] if c["frames"] == 2 and c["params"]["content"] == "camera")
    sub = dict(doc, clips=[c for c in doc["clips"] if c["name"] == name])
    path = Path(doc["_dir"]) / "one.json"
    path.write_text(json.dumps(sub))
    run = conformance.run(path, session)
    (r,) = run.clips
    assert not r.bitexact and not run.passed
    assert r.max_abs == {"Y": 0, "Cb": 0, "Cr": 3}
    assert r.reference_md5_ok and not r.candidate_md5_ok and r.first_md5_mismatch == 0
    rows = table_rows(conformance.markdown(run, "test"))
    assert rows[0][3:8] == ["0", "0", "3", "–", "**NO**"]


def test_write_markdown_keeps_the_rest(tmp_path):
    section = conformance.BEGIN + "\nnew table\n" + conformance.END + "\n"
    new = tmp_path / "new.md"
    conformance.write_markdown(new, section)
    assert new.read_text() == "# Conformance\n\n" + section
    other = tmp_path / "other.md"
    other.write_text("# Conformance\n\n<!-- idct-accuracy:begin -->\nidct\n<!-- idct-accuracy:end -->\n")
    conformance.write_markdown(other, section)
    assert other.read_text() == ("# Conformance\n\n<!-- idct-accuracy:begin -->\nidct\n"
                                 "<!-- idct-accuracy:end -->\n\n" + section)
    conformance.write_markdown(other, section.replace("new", "newer"))
    assert other.read_text().count("table") == 1 and "newer table" in other.read_text()
    assert "idct\n" in other.read_text()


def test_bad_manifests(tmp_path):
    (tmp_path / "m.json").write_text("{not json")
    res = cli("conformance", tmp_path / "m.json")
    assert res.returncode == 2 and "not a JSON manifest" in res.stderr
    (tmp_path / "m.json").write_text(json.dumps({"schema": "other", "clips": []}))
    res = cli("conformance", tmp_path / "m.json")
    assert res.returncode == 2 and "not a valid corpus manifest" in res.stderr
    res = cli("conformance", tmp_path / "missing.json")
    assert res.returncode == 2 and "no such manifest" in res.stderr
    res = cli("corpus")
    assert res.returncode == 2 and "OUTDIR is required" in res.stderr


# ---------------------------------------------------------------------------- recipes

@pytest.mark.parametrize("mode", corpus.MODES)
def test_recipe_lists_in_sync(mode):
    """tools/gpu/corpus-MODE.tsv (read by tools/gpu/conformance-gpu) is the Python corpus."""
    path = REPO_ROOT / "tools" / "gpu" / f"corpus-{mode}.tsv"
    want = corpus.recipes_tsv(corpus.recipes_for(mode))
    assert path.read_text() == want, (f"{path} is stale: regenerate it with "
                                      f"`pyprores corpus --{mode} --recipes > {path.relative_to(REPO_ROOT)}`")
    res = cli("corpus", f"--{mode}", "--recipes")
    assert res.returncode == 0 and res.stdout == want


def _feasible_pairs(factors):
    for f1, f2 in itertools.combinations(factors, 2):
        for v1 in factors[f1]:
            for v2 in factors[f2]:
                if not corpus._conflict({f1: v1, f2: v2}):
                    yield (f1, v1), (f2, v2)


@pytest.mark.parametrize("sizes", [corpus.QUICK_SIZES, corpus.FULL_SIZES], ids=["quick", "full"])
def test_covering_array_has_every_pair(sizes):
    recipes = corpus._covering(sizes, frames=2)
    factors = {"profile": tuple(corpus.PROFILES), "quant": tuple(corpus.QUANTS), "content": corpus.CONTENTS,
               "size": sizes, "mbs_per_slice": corpus.SLICES, "alpha_bits": corpus.ALPHAS,
               "scan": corpus.SCANS, "encoder": corpus.ENCODERS}
    rows = [{"profile": r.profile, "quant": r.quant, "content": r.content, "size": (r.width, r.height),
             "mbs_per_slice": r.mbs_per_slice, "alpha_bits": r.alpha_bits, "scan": r.scan,
             "encoder": r.encoder} for r in recipes]
    missing = [p for p in _feasible_pairs(factors)
               if not any(row[p[0][0]] == p[0][1] and row[p[1][0]] == p[1][1] for row in rows)]
    assert not missing, missing[:10]
    assert len(rows) < 60          # a covering array, not the product


def test_full_corpus_recipes():
    full = corpus.full_recipes()
    names = [r.name for r in full]
    assert len(names) == len(set(names))
    assert all(not r.problems() for r in full)
    sizes = {(r.width, r.height) for r in full}
    assert sizes == {(16, 16), (720, 486), (1918, 1078), (1920, 1080), (3840, 2160), (8192, 4320)}
    (big,) = [r for r in full if r.width == 8192]
    assert big.frames == 1
    # the structural product is complete at 720x486
    combos = {(r.encoder, r.profile, r.alpha_bits, r.scan, r.mbs_per_slice) for r in full
              if (r.width, r.height) == (720, 486) and r.content == "camera" and r.quant == "auto"
              and not r.quant_mat}
    assert len(combos) == 144
    for enc, content, quant in itertools.product(("prores_ks",), corpus.CONTENTS, corpus.QUANTS):
        assert any(r.encoder == enc and r.content == content and r.quant == quant for r in full)
    assert {r.quant_mat for r in full if r.quant_mat} == set(corpus.QUANT_MATS)


def test_recipe_rejects_impossible_combinations():
    assert not Recipe("ok", encoder="prores_aw", scan="tff", width=64, height=40).problems()
    for bad in [dict(profile="hq", alpha_bits=16), dict(encoder="prores_aw", profile="4444", alpha_bits=8),
                dict(encoder="prores_aw", mbs_per_slice=4), dict(encoder="prores_aw", quant="q1"),
                dict(mbs_per_slice=3), dict(width=51), dict(quant="q0"),
                # FFmpeg 7.1.5's prores_aw reads past the frame there (3840x2160 TFF segfaults)
                dict(encoder="prores_aw", scan="tff", width=64, height=48),
                dict(encoder="prores_aw", scan="bff", width=3840, height=2160)]:
        with pytest.raises(ValueError):
            Recipe("x", **bad)


# ---------------------------------------------------------------------------- tools/gpu/conformance-gpu

GPU_SCRIPT = REPO_ROOT / "tools" / "gpu" / "conformance-gpu"
GPU_SUBSET = "^(ks-4444xq-a16-tff-s1-camera-232x88-1f|aw-4444-a16-bff-camera-232x88-1f|ks-hq-s8-camera-720x486-1f)$"


def test_conformance_gpu_script_on_lavapipe(ffmpeg_dir, tmp_path):
    """The GPU script, ffmpeg binary only, on a few quick-corpus clips here."""
    out = tmp_path / "gpu.md"
    res = subprocess.run(["bash", str(GPU_SCRIPT), "--ffmpeg", str(ffmpeg_dir), "--quick", "--only", GPU_SUBSET,
                          "--out", str(out), "--jobs", "2", "--workdir", str(tmp_path / "w")],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    text = out.read_text()
    assert "**3/3 clips bit-exact**" in text
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| clip")]
    assert len(rows) == 3
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[5] == "yes" and cells[6] == "0 (all planes)" and cells[7] == "yes", row
        assert cells[3] == "1/1" and cells[4] == "1/1" and cells[8] not in ("", "-")


def test_conformance_gpu_script_reports_a_mismatch(ffmpeg_dir, tmp_path):
    """A Vulkan path that changes one sample (a wrapper adds a filter after hwdownload):
    exit 1, the clip marked NO, the plane and its deviation named."""
    fake = tmp_path / "ff"
    (fake / "bin").mkdir(parents=True)
    os.symlink(ffmpeg_dir / "lib", fake / "lib")
    os.symlink(ffmpeg_dir / "bin" / "ffprobe", fake / "bin" / "ffprobe")
    wrapper = fake / "bin" / "ffmpeg"
    wrapper.write_text(f"""#!/usr/bin/env bash
args=()
for a in "$@"; do
    if [[ $a == hwdownload,format=* ]]; then a="$a,geq=lum='lum(X,Y)':cb='cb(X,Y)+2*eq(X,1)*eq(Y,1)':cr='cr(X,Y)'"; fi
    args+=("$a")
done
exec {ffmpeg_dir / 'bin' / 'ffmpeg'} "${{args[@]}}"
""")
    wrapper.chmod(0o755)
    out = tmp_path / "gpu.md"
    res = subprocess.run(["bash", str(GPU_SCRIPT), "--ffmpeg", str(fake), "--quick",
                          "--only", "^ks-hq-s8-camera-720x486-1f$", "--out", str(out), "--jobs", "1"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 1, res.stdout + res.stderr
    text = out.read_text()
    assert "**0/1 clips bit-exact**" in text
    row = next(line for line in text.splitlines() if line.startswith("| ks-hq-s8-camera-720x486-1f"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[5] == "**NO**" and cells[4] == "0/1"
    assert cells[6] == "Y=0 Cb=2 Cr=0 (first bad frame 0)", row
    assert "kept " in res.stderr      # the work dir stays for a look at the failure


def test_conformance_gpu_script_setup_errors(tmp_path):
    res = subprocess.run(["bash", str(GPU_SCRIPT), "--ffmpeg", str(tmp_path)], capture_output=True, text=True)
    assert res.returncode == 2 and "no bin/ffmpeg" in res.stderr
    res = subprocess.run(["bash", str(GPU_SCRIPT), "--bogus"], capture_output=True, text=True)
    assert res.returncode == 2
    res = subprocess.run(["bash", str(GPU_SCRIPT), "--help"], capture_output=True, text=True)
    assert res.returncode == 0 and "Usage: tools/gpu/conformance-gpu" in res.stdout


# ---------------------------------------------------------------------------- slow: the full corpus

@pytest.mark.slow
def test_full_corpus_conformance(tmp_path, ffmpeg_dir):
    """The whole --full corpus made and checked here (lavapipe: tens of minutes)."""
    res = cli("corpus", tmp_path, "--full", "--ffmpeg", ffmpeg_dir, "--no-progress", timeout=7200)
    assert res.returncode == 0, res.stderr
    assert corpus.manifest_problems(json.loads((tmp_path / "manifest.json").read_text())) == []
    res = cli("conformance", tmp_path, "--out", tmp_path / "c.md", "--no-progress", timeout=7200)
    assert res.returncode == 0, res.stdout + res.stderr
