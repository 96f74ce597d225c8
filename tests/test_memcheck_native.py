"""csrc under AddressSanitizer/UBSan on every commit: tools/gpu/memcheck-native --no-valgrind
builds csrc/tools/ppr_smoke.c with -fsanitize=address,undefined against a build and drives
the whole C API (one-shot decodes, slice rebuilds, damaged and left-out slices, streaming
with prepared packets and taken frames downloaded later, every error path) over three tiny
clips on the software backend and, where lavapipe is there, the Vulkan one, comparing
planes between them. Any sanitizer report, leak or mismatch fails it (without the
validation layer, whose own allocations LeakSanitizer would report).
Valgrind, much slower, stays in the script's default run (docs/ROBUSTNESS.md)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO_ROOT, ffmpeg_dir_path

BUILD_9 = REPO_ROOT / "build" / "ffmpeg-9.0.2"


@pytest.mark.parametrize("build", [pytest.param(None, id="7.1.5"), pytest.param(BUILD_9, id="9.0.2")])
def test_csrc_under_asan(build: Path | None) -> None:
    if shutil.which("gcc") is None:
        pytest.skip("no gcc")
    ff = build if build is not None else ffmpeg_dir_path()
    if not (ff / "bin" / "ffmpeg").is_file():
        if os.environ.get("CI"):
            pytest.fail(f"no FFmpeg build at {ff}")
        pytest.skip(f"no FFmpeg build at {ff}")
    env = dict(os.environ, PYPRORES_FFMPEG_DIR=str(ff))
    # the Khronos layer (C++) leaves its own allocations at exit, which LeakSanitizer
    # reports; the validation of this path is the Python tests' and the fuzzer's
    env.pop("PYPRORES_VALIDATION", None)
    res = subprocess.run([str(REPO_ROOT / "tools" / "gpu" / "memcheck-native"), "--no-valgrind"],
                         capture_output=True, text=True, env=env, timeout=300)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-4000:]
    ok = [line for line in res.stdout.splitlines() if line.startswith("ok    asan")]
    # three clips on the software backend at least, each with every packet decoded
    assert sum(" software:" in line for line in ok) == 3, out[-4000:]
    assert all("failures: 0" in line and "validation messages: 0" in line for line in ok), out
    assert "FAIL" not in res.stdout
