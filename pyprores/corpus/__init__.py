"""The conformance corpus: which clips, how they are made, and their manifest.

Dimensions (see :class:`pyprores.corpus.clips.Recipe`): encoder (prores_ks,
prores_aw) x profile (6) x alpha (none, 8, 16 bit) x scan (progressive, TFF,
BFF) x macroblocks per slice (1, 2, 4, 8) x quantiser (rate control, q1, q64,
8192 bits/MB) x size x content (camera, edges, flat, noise).

The cartesian product is about 40,000 clips (≈ 18,000 valid ones), far too
many to encode, so neither mode is the full product:

``quick`` (CI on lavapipe: seconds to make, seconds to check):
    1. every combination of encoder x profile x alpha x scan x slice size at
       232x88 (15 macroblocks wide, so one row has slices of 8, 4, 2 and 1
       MBs; partial macroblock rows in both scans), one frame each: 144 clips;
    2. an all-pairs covering array over every dimension with sizes 16x16,
       50x34 and 232x88, 2 frames each;
    3. two 720x486 frames (422 HQ camera; 4444 + 16-bit alpha TFF noise).
``full`` (the GPU machine, tools/gpu/conformance-gpu):
    1. every combination of the dimensions that change the decoder's work
       (encoder x profile x alpha x scan x slice size) at 720x486, camera
       content, rate control: 144 clips;
    2. an all-pairs covering array over every dimension with sizes 16x16,
       720x486, 1918x1078, 1920x1080 and 3840x2160, so that each pair of
       values of any two dimensions (4K with q1, noise with 16-bit alpha, BFF
       with prores_aw, ...) occurs in at least one clip;
    3. every prores_ks -quant_mat, a worst-case-coefficients clip (4444 XQ,
       16-bit alpha, q1, noise, 1080p), prores_aw 4K 4444 XQ + alpha and 1918x1078
       BFF 4444 + alpha, and one 8192x4320 frame.

prores_aw is left out for interlaced pictures whose height is a multiple of
16 but whose field height is not (3840x2160, 16x16): FFmpeg 7.1.5's encoder
reads past the frame there (see :func:`pyprores.corpus.clips.aw_field_overread`).

The manifest (``manifest.json``) lists each clip's recipe, the command line,
what ffprobe says about it, and the software decoder's framemd5 of every
frame in its native format (``ffmpeg -i CLIP -f framemd5 -pix_fmt FMT -``).
"""

from __future__ import annotations

import datetime
import itertools
import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterable

from .clips import CONTENTS, ENCODERS, PROFILES, QUANT_MATS, QUANTS, SCANS, Recipe, aw_field_overread
from ..errors import PyproresError

MANIFEST_SCHEMA = "pyprores-corpus/1"
MODES = ("quick", "full")
SLICES = (1, 2, 4, 8)
ALPHAS = (0, 8, 16)

QUICK_SIZES = ((16, 16), (50, 34), (232, 88))
FULL_SIZES = ((16, 16), (720, 486), (1918, 1078), (1920, 1080), (3840, 2160))


# -- naming ---------------------------------------------------------------------

def recipe_name(r: Recipe) -> str:
    """A file stem that encodes every parameter, e.g. ``ks-4444-a16-bff-s2-q1-noise-50x34``."""
    parts = ["ks" if r.encoder == "prores_ks" else "aw", r.profile]
    if r.alpha_bits:
        parts.append(f"a{r.alpha_bits}")
    if r.scan != "progressive":
        parts.append(r.scan)
    if r.encoder == "prores_ks":
        parts.append(f"s{r.mbs_per_slice}")
    if r.quant != "auto":
        parts.append(r.quant)
    if r.quant_mat:
        parts.append(f"qm{r.quant_mat}")
    parts += [r.content, r.size]
    if r.frames != 2:
        parts.append(f"{r.frames}f")
    return "-".join(parts)


def make(**kw) -> Recipe:
    """A Recipe named by :func:`recipe_name`."""
    r = Recipe(name="x", **kw)
    return replace(r, name=recipe_name(r))


# -- covering arrays ---------------------------------------------------------------

def _conflict(a: dict) -> bool:
    """True when a partial assignment cannot be part of a valid recipe."""
    enc, prof, alpha = a.get("encoder"), a.get("profile"), a.get("alpha_bits")
    if alpha and prof is not None and prof not in ("4444", "4444xq"):
        return True
    if enc == "prores_aw":
        if alpha == 8:
            return True
        if a.get("mbs_per_slice", 8) != 8 or a.get("quant", "auto") != "auto":
            return True
        if "size" in a and aw_field_overread(a.get("scan", "progressive"), a["size"][1]):
            return True
    return False


def pairwise(factors: dict[str, tuple], conflict: Callable[[dict], bool] = _conflict) -> list[dict]:
    """A deterministic all-pairs covering array (greedy, in the style of AETG).

    Every pair of values of two factors that some valid row can hold occurs in
    at least one row. Rows are built one at a time: start from the first
    uncovered pair, then give each other factor the value that covers the
    most uncovered pairs with the values already chosen (on ties, the value
    used least so far, then the first one, so that fill-in values spread out).
    """
    names = list(factors)
    idx = {n: i for i, n in enumerate(names)}
    uncovered = set()
    for f1, f2 in itertools.combinations(names, 2):
        for v1 in factors[f1]:
            for v2 in factors[f2]:
                if not conflict({f1: v1, f2: v2}):
                    uncovered.add(((f1, v1), (f2, v2)))

    def key(p):
        return (idx[p[0][0]], factors[p[0][0]].index(p[0][1]), idx[p[1][0]], factors[p[1][0]].index(p[1][1]))

    rows = []
    uses = {n: {v: 0 for v in factors[n]} for n in names}
    while uncovered:
        (f1, v1), (f2, v2) = min(uncovered, key=key)
        row = {f1: v1, f2: v2}
        for f in names:
            if f in row:
                continue
            best, best_score = None, None
            for v in factors[f]:
                trial = {**row, f: v}
                if conflict(trial):
                    continue
                gain = sum(1 for g, w in row.items()
                           if (((g, w), (f, v)) if idx[g] < idx[f] else ((f, v), (g, w))) in uncovered)
                score = (gain, -uses[f][v])
                if best_score is None or score > best_score:
                    best, best_score = v, score
            if best is None:      # cannot happen with _conflict's rules; keep the loop honest
                raise ValueError(f"no valid value of {f} for {row}")
            row[f] = best
        covered = {((a, row[a]), (b, row[b])) for a, b in itertools.combinations(names, 2)}
        before = len(uncovered)
        uncovered -= covered
        assert len(uncovered) < before
        for f in names:
            uses[f][row[f]] += 1
        rows.append(row)
    return rows


def _covering(sizes: tuple[tuple[int, int], ...], frames: int) -> list[Recipe]:
    factors = {
        "profile": tuple(PROFILES),
        "quant": tuple(QUANTS),
        "content": CONTENTS,
        "size": sizes,
        "mbs_per_slice": SLICES,
        "alpha_bits": ALPHAS,
        "scan": SCANS,
        "encoder": ENCODERS,
    }
    out = []
    for row in pairwise(factors):
        w, h = row.pop("size")
        out.append(make(width=w, height=h, frames=frames, **row))
    return out


def _structural(width: int, height: int, frames: int) -> list[Recipe]:
    """Every encoder x profile x alpha x scan x slice size combination."""
    out = []
    for enc, prof, alpha, scan, mbs in itertools.product(ENCODERS, PROFILES, ALPHAS, SCANS, SLICES):
        a = {"encoder": enc, "profile": prof, "alpha_bits": alpha, "scan": scan, "mbs_per_slice": mbs}
        if _conflict(a):
            continue
        out.append(make(width=width, height=height, frames=frames, content="camera", **a))
    return out


def _unique(recipes: Iterable[Recipe]) -> list[Recipe]:
    seen, out = set(), []
    for r in recipes:
        if r.name not in seen:
            seen.add(r.name)
            out.append(r)
    return out


def quick_recipes() -> list[Recipe]:
    """The CI corpus: the structural product at 232x88 (one frame each), all
    pairs at small sizes (2 frames each) and one SD frame."""
    return _unique([
        *_structural(232, 88, frames=1),
        *_covering(QUICK_SIZES, frames=2),
        make(profile="hq", width=720, height=486, frames=1, content="camera"),
        make(profile="4444", alpha_bits=16, scan="tff", width=720, height=486, frames=1, content="noise"),
    ])


def full_recipes() -> list[Recipe]:
    """The GPU corpus (see the module docstring)."""
    extras = [make(profile="hq", quant_mat=qm, width=720, height=486, content="edges") for qm in QUANT_MATS]
    extras += [
        make(profile="4444xq", alpha_bits=16, quant="q1", content="noise", width=1920, height=1080),
        make(encoder="prores_aw", profile="4444xq", alpha_bits=16, content="noise", width=3840, height=2160),
        make(encoder="prores_aw", profile="4444", alpha_bits=16, scan="bff", content="camera",
             width=1918, height=1078),
        make(profile="4444xq", alpha_bits=16, content="camera", width=8192, height=4320, frames=1),
    ]
    return _unique([*_structural(720, 486, frames=2), *_covering(FULL_SIZES, frames=2), *extras])


def recipes_for(mode: str) -> list[Recipe]:
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}")
    return quick_recipes() if mode == "quick" else full_recipes()


# -- recipe lists for tools/gpu/conformance-gpu --------------------------------------

OUTPUT_PLACEHOLDER = "{out}"


def recipes_tsv(recipes: Iterable[Recipe]) -> str:
    """One line per clip, tab-separated: name, frames, decoded pixel format,
    codec tag, description, then the ffmpeg arguments with ``{out}`` for the
    output file. tools/gpu/conformance-gpu reads this with bash alone."""
    lines = ["# pyprores corpus recipes: name, frames, pix_fmt, codec_tag, description, ffmpeg args "
             "(output: {out}). Generated by `pyprores corpus --recipes`; do not edit."]
    for r in recipes:
        args = r.ffmpeg_args(OUTPUT_PLACEHOLDER)
        fields = [r.name, str(r.frames), r.decoded_pix_fmt, r.codec_tag, r.describe(), *args]
        if any("\t" in f or "\n" in f for f in fields):
            raise ValueError(f"recipe {r.name} has a tab or newline in its arguments")
        lines.append("\t".join(fields))
    return "\n".join(lines) + "\n"


# -- generation -----------------------------------------------------------------------

def ffmpeg_version(ffmpeg: str | os.PathLike) -> str:
    res = subprocess.run([os.fspath(ffmpeg), "-hide_banner", "-version"], capture_output=True, text=True)
    return res.stdout.splitlines()[0] if res.returncode == 0 and res.stdout else "unknown"


def probe(ffprobe: str | os.PathLike, path: str | os.PathLike) -> dict:
    """Stream facts of the first video stream, as ffprobe sees them."""
    res = subprocess.run([os.fspath(ffprobe), "-v", "error", "-select_streams", "v:0", "-show_entries",
                          "stream=codec_name,codec_tag_string,pix_fmt,width,height,field_order",
                          "-of", "json", os.fspath(path)], capture_output=True, text=True, timeout=120)
    if res.returncode != 0:
        raise PyproresError(f"ffprobe failed on {path}: {res.stderr.strip()[-500:]}")
    streams = json.loads(res.stdout).get("streams") or []
    if not streams:
        raise PyproresError(f"ffprobe finds no video stream in {path}")
    return streams[0]


def framemd5(ffmpeg: str | os.PathLike, path: str | os.PathLike, pix_fmt: str,
             pre_input: Iterable[str] = (), filters: str | None = None, timeout: float = 600) -> list[str]:
    """Per-frame MD5s of ``ffmpeg [pre_input] -i path -f framemd5 -pix_fmt FMT -``
    (or ``-vf filters`` instead of ``-pix_fmt``)."""
    out = ["-vf", filters] if filters else ["-pix_fmt", pix_fmt]
    argv = [os.fspath(ffmpeg), "-hide_banner", "-nostdin", "-loglevel", "error", *pre_input,
            "-i", os.fspath(path), *out, "-f", "framemd5", "-"]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if res.returncode != 0:
        raise PyproresError(f"{' '.join(argv)} failed: {res.stderr.strip()[-800:]}")
    return parse_framemd5(res.stdout)


def parse_framemd5(text: str) -> list[str]:
    """The hash column of framemd5 output, one per frame."""
    return [line.rsplit(",", 1)[1].strip() for line in text.splitlines()
            if line and not line.startswith("#")]


def make_clip(recipe: Recipe, outdir: Path, ffmpeg: Path, ffprobe: Path) -> dict:
    """Encode one clip, probe it, hash its frames: its manifest entry."""
    try:
        path = recipe.encode(ffmpeg, outdir)
    except subprocess.CalledProcessError as e:
        raise PyproresError(f"encoding {recipe.name} failed ({' '.join(map(str, e.cmd))}): "
                            f"{(e.stderr or '').strip()[-800:]}") from e
    info = probe(ffprobe, path)
    fmt = info.get("pix_fmt")
    if fmt != recipe.decoded_pix_fmt or info.get("codec_tag_string") != recipe.codec_tag:
        raise PyproresError(f"{path}: ffprobe says {info.get('codec_tag_string')} {fmt}, the recipe "
                            f"expects {recipe.codec_tag} {recipe.decoded_pix_fmt}")
    md5s = framemd5(ffmpeg, path, fmt)
    if len(md5s) != recipe.frames:
        raise PyproresError(f"{path}: {len(md5s)} frames decoded, {recipe.frames} encoded")
    return {
        "name": recipe.name,
        "file": path.name,
        "description": recipe.describe(),
        "params": recipe.params(),
        "ffmpeg_args": recipe.ffmpeg_args(path.name),
        "codec_tag": info.get("codec_tag_string"),
        "pix_fmt": fmt,
        "field_order": info.get("field_order"),
        "width": info.get("width"),
        "height": info.get("height"),
        "frames": len(md5s),
        "bytes": path.stat().st_size,
        "framemd5": md5s,
    }


def generate(outdir: str | os.PathLike, mode: str, ffmpeg_dir: str | os.PathLike,
             jobs: int | None = None, progress: Callable[[int, int], None] | None = None,
             recipes: list[Recipe] | None = None, command: str | None = None) -> Path:
    """Make the corpus of ``mode`` in ``outdir`` and write ``outdir/manifest.json``."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    ffmpeg = Path(ffmpeg_dir) / "bin" / "ffmpeg"
    ffprobe = Path(ffmpeg_dir) / "bin" / "ffprobe"
    for b in (ffmpeg, ffprobe):
        if not b.is_file():
            raise PyproresError(f"{b} not found: run ./scripts/setup or pass --ffmpeg DIR")
    recipes = recipes_for(mode) if recipes is None else recipes
    jobs = jobs or os.cpu_count() or 1
    entries: list[dict | None] = [None] * len(recipes)
    done = 0
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(make_clip, r, outdir, ffmpeg, ffprobe): i for i, r in enumerate(recipes)}
        for fut in futures:   # in submission order; the pool runs them concurrently
            entries[futures[fut]] = fut.result()
            done += 1
            if progress:
                progress(done, len(recipes))
    manifest = {
        "schema": MANIFEST_SCHEMA,
        "mode": mode,
        "command": command,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "ffmpeg": {"dir": os.fspath(Path(ffmpeg_dir).resolve()), "version": ffmpeg_version(ffmpeg)},
        "clips": entries,
    }
    path = outdir / "manifest.json"
    path.write_text(json.dumps(manifest, indent=1) + "\n")
    return path


def load_manifest(path: str | os.PathLike) -> dict:
    """Read and check a manifest; clip files are resolved next to it."""
    path = Path(path)
    if path.is_dir():
        path = path / "manifest.json"
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise PyproresError(f"{path}: no such manifest (make one with `pyprores corpus DIR`)") from None
    except json.JSONDecodeError as e:
        raise PyproresError(f"{path} is not a JSON manifest: {e}") from None
    problems = manifest_problems(doc)
    if problems:
        raise PyproresError(f"{path} is not a valid corpus manifest: " + "; ".join(problems[:5]))
    doc["_dir"] = str(path.parent)
    return doc


def manifest_problems(doc) -> list[str]:
    """What is wrong with a manifest document (empty when well-formed)."""
    p = []
    if not isinstance(doc, dict):
        return ["not a JSON object"]
    if doc.get("schema") != MANIFEST_SCHEMA:
        p.append(f"schema is {doc.get('schema')!r}, not {MANIFEST_SCHEMA!r}")
    clips = doc.get("clips")
    if not isinstance(clips, list) or not clips:
        return p + ["no clips"]
    names = set()
    for i, c in enumerate(clips):
        if not isinstance(c, dict):
            p.append(f"clip {i} is not an object")
            continue
        for k, t in (("name", str), ("file", str), ("pix_fmt", str), ("codec_tag", str),
                     ("frames", int), ("framemd5", list), ("params", dict)):
            if not isinstance(c.get(k), t):
                p.append(f"clip {i}: {k} missing or not {t.__name__}")
        if isinstance(c.get("framemd5"), list):
            if len(c["framemd5"]) != c.get("frames"):
                p.append(f"clip {i}: {len(c['framemd5'])} MD5s for {c.get('frames')} frames")
            if not all(isinstance(h, str) and len(h) == 32 and all(ch in "0123456789abcdef" for ch in h)
                       for h in c["framemd5"]):
                p.append(f"clip {i}: framemd5 entries must be 32 hex digits")
        if c.get("name") in names:
            p.append(f"clip {i}: duplicate name {c.get('name')}")
        names.add(c.get("name"))
    return p
