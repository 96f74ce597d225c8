"""The GLSL compute shaders of csrc/shaders/ compiled to SPIR-V, each into a C
header ``NAME_spv.h`` holding the array ``ppr_NAME_spv`` that the C sources
include (shcopy.c: planecopy). csrc/build_ffi.py calls it for the extension;
the tools that compile csrc/*.c themselves (tools/gpu/memcheck-native,
fuzz-coverage) run it as a script:

    python3 csrc/compile_shaders.py OUT_DIR     # prints OUT_DIR, the -I to add

The compiler: ``$PYPRORES_GLSLANG``, else the glslang 15 that ./scripts/setup
builds (``build/glslang/bin/glslang``), else ``glslangValidator`` or
``glslang`` on PATH (Debian's glslang-tools). Standard library only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SHADER_DIR = os.path.join(HERE, "shaders")
SHADERS = ["planecopy"]


def glslang() -> str:
    """The GLSL compiler (see the module's docstring), or RuntimeError saying what to do."""
    env = os.environ.get("PYPRORES_GLSLANG")
    if env:
        if not (os.path.isfile(env) and os.access(env, os.X_OK)):
            raise RuntimeError(f"PYPRORES_GLSLANG={env} is not an executable: point it at "
                               "glslangValidator (or glslang), or unset it")
        return env
    for cand in (os.path.join(REPO, "build", "glslang", "bin", "glslang"),
                 shutil.which("glslangValidator"), shutil.which("glslang")):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    raise RuntimeError(
        "no GLSL compiler to build the shader copy (csrc/shaders/*.comp): install "
        "glslang-tools (glslangValidator), run ./scripts/setup --glslang-only (build/glslang), "
        "or set PYPRORES_GLSLANG to a glslangValidator")


def compile_shaders(out_dir: str) -> str:
    """Compile SHADERS into ``out_dir/NAME_spv.h`` (SPIR-V for Vulkan 1.1 as a
    uint32_t array), again only when the source is newer; the directory."""
    os.makedirs(out_dir, exist_ok=True)
    compiler = None
    for name in SHADERS:
        src = os.path.join(SHADER_DIR, name + ".comp")
        dst = os.path.join(out_dir, name + "_spv.h")
        if os.path.exists(dst) and os.path.getmtime(dst) >= os.path.getmtime(src):
            continue
        compiler = compiler or glslang()
        tmp = dst + ".tmp"
        run = subprocess.run([compiler, "-V", "--target-env", "vulkan1.1", "--vn",
                              f"ppr_{name}_spv", "-o", tmp, src],
                             capture_output=True, text=True)
        if run.returncode != 0 or not os.path.exists(tmp):
            raise RuntimeError(f"{compiler} could not compile {src}:\n{run.stdout}{run.stderr}")
        os.replace(tmp, dst)
    return out_dir


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: compile_shaders.py OUT_DIR")
    try:
        print(compile_shaders(os.path.abspath(sys.argv[1])))
    except RuntimeError as e:
        sys.exit(f"compile_shaders: {e}")
