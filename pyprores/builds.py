"""Which FFmpeg build pyprores runs against.

The default is what ``scripts/setup`` makes: ``build/ffmpeg`` (FFmpeg 7.1.5 +
the series) with the cffi extension compiled into the package
(``pyprores/_native*.so``). A named build ``NAME`` is the pair

  ``build/ffmpeg-NAME/``   an FFmpeg install (bin/, lib/, include/, BUILDINFO)
  ``build/native-NAME/``   the extension compiled against it, with BUILDINFO.json:
                           ``python csrc/build_ffi.py --ffmpeg-dir build/ffmpeg-NAME
                           --out-dir build/native-NAME``

selected with ``pyprores --build NAME`` or ``PYPRORES_BUILD=NAME`` (for
example ``9.0.2``). One process uses one build: the extension links one
libavcodec, and :mod:`pyprores.decode.native` loads it on import.

Environment, most specific first:
  ``PYPRORES_NATIVE_DIR``  an extension directory of any name (its BUILDINFO.json
                           names the FFmpeg build; tools/gpu/bench --native uses it)
  ``PYPRORES_BUILD``       a name as above; "" or "default" for the default
  ``PYPRORES_FFMPEG_DIR``  the FFmpeg build of the default (bin/ffmpeg for corpus,
                           fuzz seeds and tests), as before

This module only uses the standard library (csrc/build_ffi.py loads it by
path to parse BUILDINFO files).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parent
REPO = PACKAGE.parent
BUILD_DIR = REPO / "build"
ENV_BUILD = "PYPRORES_BUILD"
ENV_NATIVE_DIR = "PYPRORES_NATIVE_DIR"
ENV_FFMPEG_DIR = "PYPRORES_FFMPEG_DIR"
DEFAULT = "default"
MODULE = "pyprores._native"

_loaded_from: Path | None = None      # extension file behind pyprores._native, once loaded


class BuildError(ImportError):
    """The selected build cannot be used (missing directory or extension)."""


def selected() -> str | None:
    """The build named by ``PYPRORES_BUILD``; None for the default."""
    name = os.environ.get(ENV_BUILD, "").strip()
    return None if name in ("", DEFAULT) else name


def _check_name(name: str) -> str:
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"a build name is a suffix like 9.0.2 (build/ffmpeg-NAME), not {name!r}")
    return name


def native_dir(name: str | None = ...) -> Path | None:  # type: ignore[assignment]
    """Directory of the extension to load; None for the one inside the package."""
    if name is ...:
        env = os.environ.get(ENV_NATIVE_DIR)
        if env:
            return Path(env).resolve()
        name = selected()
    return BUILD_DIR / f"native-{_check_name(name)}" if name else None


def ffmpeg_dir(name: str | None = ...) -> Path:  # type: ignore[assignment]
    """The FFmpeg build (bin/ffmpeg, bin/ffprobe, lib/) that goes with the selection."""
    if name is ...:
        env_native = os.environ.get(ENV_NATIVE_DIR)
        if env_native:
            info = read_native_info(Path(env_native))
            if info.get("ffmpeg_dir"):
                return Path(info["ffmpeg_dir"])
        name = selected()
        if not name and os.environ.get(ENV_FFMPEG_DIR):
            return Path(os.environ[ENV_FFMPEG_DIR])
    if not name and (PACKAGE / "bin" / "ffmpeg").is_file():
        return PACKAGE        # an installed wheel (scripts/build-wheel): bin/, BUILDINFO in the package
    return BUILD_DIR / (f"ffmpeg-{_check_name(name)}" if name else "ffmpeg")


def available() -> list[str]:
    """Names of the builds under build/ that have both an FFmpeg and an extension."""
    names = []
    for d in sorted(BUILD_DIR.glob("ffmpeg-*")):
        name = d.name[len("ffmpeg-"):]
        if (d / "bin" / "ffmpeg").exists() and _extension_in(BUILD_DIR / f"native-{name}"):
            names.append(name)
    return names


# -- BUILDINFO files -----------------------------------------------------------------

def parse_buildinfo(text: str) -> dict[str, Any]:
    """scripts/setup's BUILDINFO (``key: value`` lines, and the indented lists
    ``patches:`` and ``configure:``) as a dict; patches and configure are lists."""
    info: dict[str, Any] = {"patches": [], "configure": []}
    section = None
    for line in text.splitlines():
        if line.startswith("  ") and section in ("patches", "configure"):
            info[section].append(line.strip())
            continue
        key, sep, value = line.partition(":")
        if not sep:
            continue
        section = key.strip()
        if section not in ("patches", "configure"):
            info[section] = value.strip()
    return info


def read_ffmpeg_info(ffdir: Path) -> dict[str, Any]:
    """The FFmpeg build's BUILDINFO, or {} when it has none."""
    try:
        return parse_buildinfo((Path(ffdir) / "BUILDINFO").read_text(encoding="utf-8"))
    except OSError:
        return {}


def read_native_info(ndir: Path) -> dict[str, Any]:
    """An extension directory's BUILDINFO.json, or {}."""
    try:
        return json.loads((Path(ndir) / "BUILDINFO.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


# -- loading the extension -------------------------------------------------------------

def _extension_in(d: Path) -> Path | None:
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        f = d / f"_native{suffix}"
        if f.is_file():
            return f
    return None


def _hint(name: str | None, d: Path) -> str:
    if name:
        return (f"build it with: .venv/bin/python csrc/build_ffi.py --ffmpeg-dir build/ffmpeg-{name} "
                f"--out-dir build/native-{name}")
    return f"or build one into {d} with csrc/build_ffi.py --out-dir"


def load_native() -> tuple[Any, Any]:
    """``(ffi, lib)`` of the selected build's extension, imported as
    ``pyprores._native``. Raises ImportError (BuildError) when it is missing."""
    global _loaded_from
    d = native_dir()
    if d is None:
        mod = importlib.import_module(MODULE)
    else:
        mod = sys.modules.get(MODULE)
        if mod is None:
            name = None if os.environ.get(ENV_NATIVE_DIR) else selected()
            if not d.is_dir():
                raise BuildError(f"build {name or d}: no extension directory {d}; " + _hint(name, d))
            path = _extension_in(d)
            if path is None:
                raise BuildError(f"build {name or d}: no _native extension for this Python in {d}; "
                                 + _hint(name, d))
            spec = importlib.util.spec_from_file_location(MODULE, path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            sys.modules[MODULE] = mod
    _loaded_from = Path(getattr(mod, "__file__", "") or "").resolve()
    return mod.ffi, mod.lib


def loaded_from() -> Path | None:
    """The extension file loaded as pyprores._native, None before loading."""
    return _loaded_from


def select(name: str | None) -> None:
    """Select a build for this process and its children (``--build``): sets
    ``PYPRORES_BUILD``. Must come before :mod:`pyprores.decode.native` loads the
    extension; afterwards only the build already loaded can be selected."""
    if name is not None:
        name = DEFAULT if name in ("", DEFAULT) else _check_name(name)
    before = (os.environ.get(ENV_BUILD), os.environ.get(ENV_NATIVE_DIR))
    if name is None:
        return
    os.environ[ENV_BUILD] = name
    os.environ.pop(ENV_NATIVE_DIR, None)
    if _loaded_from is not None or MODULE in sys.modules:
        want = native_dir()
        have = _loaded_from or Path(getattr(sys.modules[MODULE], "__file__", "") or "").resolve()
        same = have.parent == (want.resolve() if want else (REPO / "pyprores").resolve())
        if not same:
            os.environ.pop(ENV_BUILD, None)
            if before[0] is not None:
                os.environ[ENV_BUILD] = before[0]
            if before[1] is not None:
                os.environ[ENV_NATIVE_DIR] = before[1]
            raise BuildError(f"this process already loaded the extension {have}; select build "
                             f"{name} before pyprores.decode.native is imported (or in a new process)")
    d = ffmpeg_dir()
    if not (d / "bin" / "ffmpeg").exists():
        raise BuildError(f"build {name}: no FFmpeg at {d} (bin/ffmpeg missing); "
                         + ("run ./scripts/setup" if name == DEFAULT else
                            f"build it (scripts/setup) or link build/ffmpeg-{name} to an install"))


def describe(native_module: Any = None) -> dict[str, Any]:
    """What a report records about the FFmpeg build: its name, directory, version,
    libavcodec version and patch series (None when the build does not say).
    With ``native_module`` (pyprores.decode.native, loaded), the versions are those of
    the libraries the process actually loaded."""
    name = selected()
    ndir = native_dir()
    ffdir = ffmpeg_dir()
    ninfo = read_native_info(ndir) if ndir else {}
    finfo = read_ffmpeg_info(ffdir)
    series = ninfo.get("series") if ndir else None
    if series is None and finfo:
        series = finfo.get("patches")
    out: dict[str, Any] = {
        "build": name or (ndir.name if ndir and os.environ.get(ENV_NATIVE_DIR) else DEFAULT),
        "ffmpeg_dir": str(ffdir),
        "version": ninfo.get("ffmpeg_version"),
        "libavcodec": ninfo.get("libavcodec"),
        "series": series,
    }
    if native_module is not None and getattr(native_module, "available", lambda: False)():
        out["version"] = native_module.ffmpeg_version()
        v = native_module.avcodec_version()
        out["libavcodec"] = f"{v >> 16}.{(v >> 8) & 0xFF}.{v & 0xFF}"
    return out
