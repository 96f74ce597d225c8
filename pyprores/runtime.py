"""Where pyprores finds its native parts, and what to do when Vulkan is missing.

Two layouts:

- a checkout (``scripts/setup``): ``pyprores/_native*.so`` compiled against
  ``build/ffmpeg`` with an rpath into that build, which also holds
  ``bin/ffmpeg`` and ``bin/ffprobe``;
- an installed wheel (``scripts/build-wheel``): ``pyprores/_native*.so``,
  ``pyprores/bin/ffmpeg`` and ``pyprores/bin/ffprobe`` in the package, the
  FFmpeg shared libraries in ``pyprores.libs/`` beside it, found through the
  ``$ORIGIN`` rpath that ``auditwheel repair`` writes. Nothing is looked up in
  the source tree.

FFmpeg loads the Vulkan loader (``libvulkan.so.1``) at run time, so neither
layout links it: without it, or without a driver, only the Vulkan backend
fails, and :func:`vulkan_hint` says which package to install.
"""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent

#: what provides the loader and a driver (Debian and Ubuntu names first)
LOADER_PACKAGES = "libvulkan1 (Debian, Ubuntu; vulkan-loader on Fedora)"
DRIVER_PACKAGES = ("a Vulkan driver: your GPU's (NVIDIA's driver; mesa-vulkan-drivers for AMD and Intel) "
                   "or lavapipe, Mesa's CPU implementation (mesa-vulkan-drivers)")


def bundled_ffmpeg_dir() -> Path | None:
    """The package's own FFmpeg (``bin/ffmpeg``, ``bin/ffprobe``) in a wheel
    install, else None."""
    return PACKAGE_DIR if (PACKAGE_DIR / "bin" / "ffmpeg").is_file() else None


def ffmpeg_dir() -> Path:
    """The FFmpeg build to run (:func:`pyprores.builds.ffmpeg_dir`): the selected
    one, ``$PYPRORES_FFMPEG_DIR``, the wheel's own, else ``build/ffmpeg``."""
    from .builds import ffmpeg_dir as _ffmpeg_dir
    return _ffmpeg_dir()


def vulkan_loader_available() -> bool:
    """True when ``libvulkan.so.1`` can be loaded (as FFmpeg loads it)."""
    try:
        ctypes.CDLL("libvulkan.so.1")
    except OSError:
        return False
    return True


def vulkan_hint(message: str = "") -> str:
    """What to install, for a failure to create a Vulkan device (``message``
    is FFmpeg's reason)."""
    if not vulkan_loader_available():
        what = (f"the Vulkan loader libvulkan.so.1 is not installed: install {LOADER_PACKAGES} "
                f"and {DRIVER_PACKAGES}")
    elif any(s in message for s in ("INCOMPATIBLE_DRIVER", "No devices found", "No device",
                                    "INITIALIZATION_FAILED")):
        what = (f"the Vulkan loader found no device: install {DRIVER_PACKAGES}; "
                "`vulkaninfo --summary` (vulkan-tools) lists what the loader sees")
    else:
        what = ("check the Vulkan driver and the device index or name "
                "(`vulkaninfo --summary`, from vulkan-tools, lists the devices)")
    return what + "; the software backend (--backend software) needs no Vulkan"


def _exec(name: str) -> None:
    binary = ffmpeg_dir() / "bin" / name
    if not binary.is_file():
        sys.exit(f"pyprores-{name}: {binary} not found (this pyprores has no bundled {name}: "
                 "install the wheel, or run ./scripts/setup in a checkout)")
    os.execv(binary, [str(binary), *sys.argv[1:]])


def ffmpeg_main() -> None:
    """``pyprores-ffmpeg``: the ffmpeg program of the same build."""
    _exec("ffmpeg")


def ffprobe_main() -> None:
    """``pyprores-ffprobe``: the ffprobe program of the same build."""
    _exec("ffprobe")
