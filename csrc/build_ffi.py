"""cffi (API mode) build of ``pyprores._native`` over the C library in csrc/.

Used by setup.py as ``cffi_modules=["csrc/build_ffi.py:ffibuilder"]``, so
``pip install -e .`` compiles it; ``python csrc/build_ffi.py`` builds it in
place (into pyprores/) for development.

``python csrc/build_ffi.py --ffmpeg-dir DIR --out-dir OUT`` builds it against
another FFmpeg build (e.g. ``build/ffmpeg-9.0.2``) into ``OUT`` (e.g.
``build/native-9.0.2``), with ``OUT/BUILDINFO.json`` saying what it was built
against; ``pyprores --build NAME`` / ``PYPRORES_BUILD=NAME`` then load it
(see pyprores/builds.py).

FFmpeg comes from ``$PYPRORES_FFMPEG_DIR`` (default: ``<repo>/build/ffmpeg``,
made by ``./scripts/setup``), which must hold ``include/`` and ``lib/`` with
the shared libavformat/libavcodec/libavutil; the extension gets an rpath to that ``lib/``.
Vulkan headers: ``$PYPRORES_VULKAN_INCLUDE`` if set, else the vendored
``shared/vendor/vulkan-headers-*`` beside or inside the repo when present,
else the system's.
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import re
import shutil
import sys

from cffi import FFI

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
HEADER = os.path.join(HERE, "pyprores.h")
# the session API (session.h lists them in the order they call each other), then the rest
SESSION_SOURCES = ["errors.c", "log.c", "damage.c", "device.c", "ownpool.c", "session.c", "download.c",
                   "decode.c", "slices.c", "stream.c"]
SOURCES = SESSION_SOURCES + ["prores_headers.c", "hostdl.c", "shcopy.c", "reader.c", "cudaip.c"]
sys.path.insert(0, HERE)
from compile_shaders import compile_shaders  # noqa: E402  (csrc/compile_shaders.py: the GLSL to SPIR-V)


def ffmpeg_dir() -> str:
    d = os.environ.get("PYPRORES_FFMPEG_DIR") or os.path.join(REPO, "build", "ffmpeg")
    return os.path.abspath(d)


def header_versions(fdir: str) -> dict:
    """FFmpeg's version string and the library versions, read from the build's headers."""
    inc = os.path.join(fdir, "include")
    out: dict = {}
    try:
        text = open(os.path.join(inc, "libavutil", "ffversion.h"), encoding="utf-8").read()
        m = re.search(r'#define\s+FFMPEG_VERSION\s+"([^"]*)"', text)
        if m:
            out["ffmpeg_version"] = m.group(1)
    except OSError:
        pass
    for lib in ("libavcodec", "libavutil", "libavformat"):
        parts = []
        for name in ("version_major.h", "version.h"):
            try:
                text = open(os.path.join(inc, lib, name), encoding="utf-8").read()
            except OSError:
                continue
            for part in ("MAJOR", "MINOR", "MICRO"):
                m = re.search(rf"#define\s+{lib.upper()}_VERSION_{part}\s+(\d+)", text)
                if m:
                    parts.append((part, m.group(1)))
        found = dict(parts)
        if all(k in found for k in ("MAJOR", "MINOR", "MICRO")):
            out[lib] = f"{found['MAJOR']}.{found['MINOR']}.{found['MICRO']}"
    return out


def ffmpeg_buildinfo(fdir: str) -> dict:
    """The patch series and configure line from the BUILDINFO scripts/setup writes
    into the FFmpeg build (``patches:`` and ``configure:`` lists); {} without one."""
    path = os.path.join(fdir, "BUILDINFO")
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError:
        return {}
    info: dict = {"patches": [], "configure": []}
    section = None
    for line in lines:
        if line.startswith("  ") and section in info:
            info[section].append(line.strip())
            continue
        key, _, value = line.partition(":")
        section = key.strip()
        if section not in info and value.strip():
            info[section] = value.strip()
    return info


def vulkan_include_dirs() -> list[str]:
    env = os.environ.get("PYPRORES_VULKAN_INCLUDE")
    if env:
        return [os.path.abspath(env)]
    for base in (os.path.join(REPO, "shared"), os.path.join(os.path.dirname(REPO), "shared")):
        found = sorted(glob.glob(os.path.join(base, "vendor", "vulkan-headers-*", "include")))
        if found:
            return [found[-1]]
    return []


def cdef_from_header(path: str = HEADER) -> str:
    text = open(path, encoding="utf-8").read()
    start = text.index("/* CFFI_BEGIN */") + len("/* CFFI_BEGIN */")
    end = text.index("/* CFFI_END */")
    return text[start:end]


# Compiled into the extension only (it needs Python.h): the destructor of a
# DLPack capsule (pyprores.decode.cuda makes them with PyCapsule_New). A capsule that
# a consumer took was renamed ("used_dltensor"): the consumer calls the
# tensor's deleter then; one never taken still has its name, and its tensor
# is deleted here.
PY_CDEF = "void ppr_py_dlpack_capsule_destructor(void *capsule);"
PY_SOURCE = r"""
static void ppr_py_dlpack_capsule_destructor(void *obj)
{
    PyObject *capsule = obj, *type, *value, *tb;
    int versioned;
    void *managed;

    versioned = PyCapsule_IsValid(capsule, "dltensor_versioned");
    if (!versioned && !PyCapsule_IsValid(capsule, "dltensor"))
        return;
    PyErr_Fetch(&type, &value, &tb);
    managed = PyCapsule_GetPointer(capsule, versioned ? "dltensor_versioned" : "dltensor");
    if (managed)
        ppr_dlpack_delete(managed, versioned);
    else
        PyErr_WriteUnraisable(capsule);
    PyErr_Restore(type, value, tb);
}
"""


def _source_path(name: str) -> str:
    path = os.path.join(HERE, name)
    try:  # setuptools prefers paths relative to setup.py's directory
        rel = os.path.relpath(path, os.getcwd())
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def make_builder(absolute_sources: bool = False, fdir: str | None = None) -> FFI:
    fdir = os.path.abspath(fdir) if fdir else ffmpeg_dir()
    inc = os.path.join(fdir, "include")
    lib = os.path.join(fdir, "lib")
    if not os.path.isfile(os.path.join(inc, "libavcodec", "avcodec.h")):
        raise RuntimeError(
            f"FFmpeg headers not found in {inc}: run ./scripts/setup to build FFmpeg "
            "into build/ffmpeg, or set PYPRORES_FFMPEG_DIR (or pass --ffmpeg-dir) to an "
            "FFmpeg 7.1 or 9.0 install with include/ and lib/")
    builder = FFI()
    builder.cdef(cdef_from_header())
    builder.cdef(PY_CDEF)
    builder.set_source(
        "pyprores._native",
        '#include "pyprores.h"\n' + PY_SOURCE,
        sources=[os.path.join(HERE, s) if absolute_sources else _source_path(s)
                 for s in SOURCES],
        include_dirs=[HERE, compile_shaders(os.path.join(REPO, "build", "shaders")), inc]
        + vulkan_include_dirs(),
        library_dirs=[lib],
        libraries=["avformat", "avcodec", "avutil", "pthread", "dl"],
        extra_compile_args=["-std=gnu11", "-O2", "-Wall"],
        extra_link_args=[f"-Wl,-rpath,{lib}"],
    )
    return builder


if __name__ != "__main__":        # setup.py's cffi_modules entry
    ffibuilder = make_builder()


def build_in_place() -> str:
    """Compile the extension and copy it into the pyprores package."""
    tmp = os.path.join(REPO, "build", "cffi")
    os.makedirs(tmp, exist_ok=True)
    # cffi compiles from inside tmpdir: give it absolute source paths
    built = make_builder(absolute_sources=True).compile(tmpdir=tmp, verbose=False)
    dest = os.path.join(REPO, "pyprores", os.path.basename(built))
    # drop other builds (e.g. pip's _native.abi3.so): Python would pick one by suffix order
    for old in glob.glob(os.path.join(REPO, "pyprores", "_native*.so")):
        if os.path.abspath(old) != os.path.abspath(dest):
            os.remove(old)
    shutil.copy2(built, dest)
    return dest


def build_into(fdir: str, out_dir: str) -> str:
    """Compile the extension against the FFmpeg build in ``fdir`` into
    ``out_dir`` (``out_dir/_native*.so`` and ``out_dir/BUILDINFO.json``)."""
    fdir, out_dir = os.path.abspath(fdir), os.path.abspath(out_dir)
    tmp = os.path.join(out_dir, "cffi")
    os.makedirs(tmp, exist_ok=True)
    built = make_builder(absolute_sources=True, fdir=fdir).compile(tmpdir=tmp, verbose=False)
    for old in glob.glob(os.path.join(out_dir, "_native*.so")):
        os.remove(old)
    dest = os.path.join(out_dir, os.path.basename(built))
    shutil.copy2(built, dest)
    setup_info = ffmpeg_buildinfo(fdir)
    info = {
        "ffmpeg_dir": fdir,
        "ffmpeg_real_dir": os.path.realpath(fdir),
        **header_versions(fdir),
        # None: the FFmpeg build has no BUILDINFO, so its patches are unknown
        "series": setup_info.get("patches"),
        "ffmpeg_key": setup_info.get("key"),
        "extension": os.path.basename(dest),
        "built": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "vulkan_include": vulkan_include_dirs(),
    }
    with open(os.path.join(out_dir, "BUILDINFO.json"), "w", encoding="utf-8") as f:
        json.dump(info, f, indent=2)
        f.write("\n")
    return dest


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Build pyprores' cffi extension (pyprores._native).")
    ap.add_argument("--ffmpeg-dir", metavar="DIR",
                    help="FFmpeg install with include/ and lib/ (default: $PYPRORES_FFMPEG_DIR, "
                         "else build/ffmpeg)")
    ap.add_argument("--out-dir", metavar="DIR",
                    help="write the extension and BUILDINFO.json here (e.g. build/native-9.0.2) "
                         "instead of into pyprores/")
    args = ap.parse_args(argv)
    if args.out_dir:
        print(build_into(args.ffmpeg_dir or ffmpeg_dir(), args.out_dir))
    else:
        if args.ffmpeg_dir:
            os.environ["PYPRORES_FFMPEG_DIR"] = os.path.abspath(args.ffmpeg_dir)
        print(build_in_place())
    return 0


if __name__ == "__main__":
    sys.exit(main())
