"""Shared pytest fixtures for pyprores.

Paths come from the layout scripts/setup makes (run the suite with ./scripts/test):
  build/ffmpeg/      symlink to ~/.cache/pyprores/ffmpeg/<key>/ (bin/, lib/, include/,
                     lib/pkgconfig/, BUILDINFO); override with $PYPRORES_FFMPEG_DIR
  .venv/             the project's virtualenv, pyprores installed editable

Fixtures:
  repo_root          Path of the repository
  ffmpeg_dir         Path of the FFmpeg build (fails the test if it is missing)
  ffmpeg_bin         Path of build/ffmpeg/bin/ffmpeg
  ffprobe_bin        Path of build/ffmpeg/bin/ffprobe
  run_ffmpeg         run_ffmpeg(*args, validate=False, check=True, timeout=300)
  run_ffprobe        same for ffprobe
  ffmpeg_tarball     Path of the pristine ffmpeg-7.1.5.tar.xz (skips if none is at hand)

Vulkan validation: ./scripts/test exports PYPRORES_VALIDATION=1. A test that wants
VK_LAYER_KHRONOS_validation passes validate=True to run_ffmpeg (it is then enabled
through VK_LOADER_LAYERS_ENABLE when PYPRORES_VALIDATION=1) and checks
validation_errors(result.stderr).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
GPU_TOOLS = REPO_ROOT / "tools" / "gpu"          # the GPU-machine toolkit (docs/GPU.md)
TARBALL_NAME = "ffmpeg-7.1.5.tar.xz"

# Validation-layer messages that are not ours: the one list of them, for every test
# (validation_errors below) and for pyprores.decode.native sessions in tests (exported as
# PYPRORES_VALIDATION_IGNORE, which csrc/log.c reads on top of its own built-in
# list; tests/test_hwaccel.py checks that the two lists agree). Each one is raised
# without any ProRes code, by Debian 12's layer (1.3.239) with stock FFmpeg 7.1.5:
#  - VUID-VkDeviceCreateInfo-pNext-pNext, VUID-VkPhysicalDeviceProperties2-pNext-pNext:
#    the layer predates the Vulkan 1.4 headers FFmpeg is built with and does not know
#    their structure types; "... is not supported by this layer": same cause (warnings).
#  - UNASSIGNED-CoreValidation-DrawState-InvalidImageLayout ("... current layout is
#    VK_IMAGE_LAYOUT_UNDEFINED"): the layer misses the layout transition that
#    hwcontext_vulkan's frame pool records when it allocates a frame (prepare_frame),
#    so the first submission that uses the frame looks wrong to it. Stock repro:
#      ffmpeg -init_hw_device vulkan=vk:0,debug=1 -filter_hw_device vk -f lavfi
#             -i color=s=64x48:d=0.08,format=yuv422p10le -vf hwupload,hwdownload,... -f null -
#  - UNASSIGNED-VkSemaphore-state-timeout ("Timeout waiting for timeline semaphore state
#    to update. This is most likely a validation bug. completed_.payload=0"): the same
#    missed submission, seen when a pool frame is freed (vulkan_frame_free waits for its
#    semaphores); the layer then stalls 10 s per semaphore. Stock repro with libavutil
#    alone (av_hwframe_get_buffer + av_frame_free): tests/tools/vk_pool_noise.c.
# Two more, raised by Debian 13's layer (1.4.309, gpu-pack --new-layer) with FFmpeg 9.0.2
# and master builds, on the GPU (2026-11-27):
#  - "DebugTypeArray: Component Count must be OpConstant" (spirv-val, at vkCreateShaderModule):
#    FFmpeg's configure compiles its shaders with glslang -gVS when debug is on (its
#    default), and glslang 15 describes arrays sized by specialization constants with a
#    spec-constant count, which spirv-val rejects; non-semantic debug information that no
#    driver executes. Stock repro: glslang -V --target-env spirv1.6 -gVS
#    libavcodec/vulkan/prores_vld.comp.glsl, then spirv-val --target-env vulkan1.3.
#  - "should be sub-allocated from larger memory blocks": a best-practices performance hint
#    (FFmpeg gives each buffer and image its own allocation), which csrc leaves out by its
#    message ID; this layer no longer puts the ID in the message FFmpeg logs.
#  - "using VK_PIPELINE_STAGE_2_ALL_COMMANDS_BIT" (at vkCmdPipelineBarrier2 and
#    vkQueueSubmit2): the best-practices hint BestPractices-pipeline-stage-flags2-compute,
#    for the same reason out of csrc's reach; FFmpeg's own code waits and barriers on
#    ALL_COMMANDS (ff_vk_exec_submit's semaphore waits, hwcontext_vulkan's transfers,
#    master's vulkan_prores.c). On the H100 (2026-11-27) the only validation message of
#    the GPU fuzz of the master and 9.0.2 series (30,198 and 29,709 mutants): up to the
#    layer's 10 repeats in every worker process.
KNOWN_LAYER_NOISE = (
    "VUID-VkDeviceCreateInfo-pNext-pNext",
    "VUID-VkPhysicalDeviceProperties2-pNext-pNext",
    "is not supported by this layer",
    "UNASSIGNED-CoreValidation-DrawState-InvalidImageLayout",
    "UNASSIGNED-VkSemaphore-state-timeout",
    "DebugTypeArray: Component Count must be OpConstant",
    "should be sub-allocated from larger memory blocks",
    "using VK_PIPELINE_STAGE_2_ALL_COMMANDS_BIT",
)
# pyprores.decode.native sessions opened by tests filter the same messages.
os.environ.setdefault("PYPRORES_VALIDATION_IGNORE", ";".join(KNOWN_LAYER_NOISE))


def load_script(name: str):
    """tools/gpu/NAME (a Python script without .py, e.g. gpu-pack) loaded as a module."""
    loader = importlib.machinery.SourceFileLoader(name.replace("-", "_"), str(GPU_TOOLS / name))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[loader.name] = module     # dataclasses look their module up there
    loader.exec_module(module)
    return module


def c_compiler() -> str:
    """$CC, else cc or gcc; skips the test when there is none."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler")
    return cc


def ffmpeg_dir_path() -> Path:
    """The build under test: build/ffmpeg-NAME with PYPRORES_BUILD=NAME (the tests'
    pyprores.decode.native then loads build/native-NAME), else $PYPRORES_FFMPEG_DIR, else
    build/ffmpeg."""
    from pyprores import builds
    return builds.ffmpeg_dir()


def validation_requested() -> bool:
    return os.environ.get("PYPRORES_VALIDATION") == "1"


def vulkan_env(validate: bool = False) -> dict[str, str]:
    """Environment for a Vulkan-using subprocess; adds the validation layer if asked."""
    env = dict(os.environ)
    if validate and validation_requested():
        env["VK_LOADER_LAYERS_ENABLE"] = "*validation*"
    return env


# What FFmpeg 9.0.2 and master themselves give under Debian 12's layer (1.3.239), pristine and
# with their series (same counts per message): pool frames' missed initial layout transition seen
# by the decoder's descriptors, barriers and clears, an ownership acquire from
# VK_QUEUE_FAMILY_IGNORED with one queue family, and the layer's SPIR-V parser, older than
# FFmpeg 9's shaders. They are run through the fake_discrete_layer below, with
# FD_NO_SHADER_OBJECT=1 and FD_NO_HOST_IMAGE_COPY=1: the layer crashes on VK_EXT_shader_object
# and predates the host-transfer image usage.
NOISE_FFMPEG9 = ("VUID-VkDescriptorImageInfo-imageLayout-00344", "VUID-vkCmdDispatch-None-02699",
                 "VUID-VkImageMemoryBarrier2-oldLayout-01197", "VUID-vkCmdClearColorImage-imageLayout-00004",
                 "UNASSIGNED-VkImageMemoryBarrier-image-00004", "VUID-VkShaderModuleCreateInfo-pCode-04146",
                 "VUID-VkPipelineShaderStageCreateInfo-module-parameter",
                 "VUID-VkPipelineShaderStageCreateInfo-pSpecializationInfo-06719")

FAKE_DISCRETE_LAYER = "VK_LAYER_PPR_fake_discrete"


@pytest.fixture(scope="session")
def fake_discrete_layer(tmp_path_factory) -> Path:
    """The directory of tests/tools/vk_fake_discrete.c built as a layer (VK_ADD_LAYER_PATH):
    every device reports a discrete GPU; FD_NO_HOST_IMAGE_COPY, FD_NO_SHADER_OBJECT and
    FD_NO_HOST_MEMORY hide those extensions, FD_STATS=FILE counts the copies."""
    cc = c_compiler()
    inc = load_script("gpu-pack").vulkan_include()     # the headers gpu-pack builds its tools with
    d = tmp_path_factory.mktemp("fake-discrete")
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-I", str(inc),
                    "-o", str(d / "libVkLayer_PPR_fake_discrete.so"),
                    str(REPO_ROOT / "tests" / "tools" / "vk_fake_discrete.c"), "-lpthread"],
                   check=True, capture_output=True, text=True)
    (d / "VkLayer_PPR_fake_discrete.json").write_text(json.dumps({
        "file_format_version": "1.1.2",
        "layer": {"name": FAKE_DISCRETE_LAYER, "type": "GLOBAL",
                  "library_path": "./libVkLayer_PPR_fake_discrete.so",
                  "api_version": "1.3.0", "implementation_version": "1",
                  "description": "test only: every device reports a discrete GPU",
                  "functions": {"vkGetInstanceProcAddr": "fd_GetInstanceProcAddr",
                                "vkGetDeviceProcAddr": "fd_GetDeviceProcAddr"}}}))
    return d


def validation_errors(stderr: str, ignore: tuple[str, ...] = KNOWN_LAYER_NOISE) -> list[str]:
    """Validation-layer error lines in stderr, minus the known layer noise."""
    return [line for line in stderr.splitlines()
            if "Validation Error" in line and not any(i in line for i in ignore)]


def validation_messages(stderr: str, ignore: tuple[str, ...] = KNOWN_LAYER_NOISE) -> list[str]:
    """Every validation-layer line in stderr (errors, warnings, performance and
    information messages, "VUID-..." lines), minus the known layer noise."""
    marks = ("Validation Error", "Validation Warning", "Validation Performance Warning",
             "Validation Information", "VUID-", "UNASSIGNED-", "SYNC-")
    return [line for line in stderr.splitlines()
            if any(m in line for m in marks) and not any(i in line for i in ignore)]


def find_tarball() -> Path | None:
    """The pristine tarball, looked up like scripts/setup does (no download)."""
    candidates = []
    if os.environ.get("PYPRORES_FFMPEG_TARBALL"):
        candidates.append(Path(os.environ["PYPRORES_FFMPEG_TARBALL"]))
    candidates.append(REPO_ROOT.parent / "shared" / "ffmpeg" / TARBALL_NAME)
    cache = Path(os.environ.get("PYPRORES_CACHE") or Path.home() / ".cache" / "pyprores")
    candidates.append(cache / "downloads" / TARBALL_NAME)
    return next((c for c in candidates if c.is_file()), None)


def default_specs(frames: int) -> dict:
    """The corpus's default clips (pyprores.corpus.clips.DEFAULT_CLIPS) by name, `frames`
    frames each."""
    from dataclasses import replace

    from pyprores.corpus import clips
    return {s.name: replace(s, frames=frames) for s in clips.DEFAULT_CLIPS}


def _runner(binary: Path):
    def run(*args, validate: bool = False, check: bool = True, timeout: float = 300,
            **kwargs) -> subprocess.CompletedProcess:
        cmd = [str(binary), *map(str, args)]
        kwargs.setdefault("env", vulkan_env(validate))
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
        if check and res.returncode != 0:
            tail = "\n".join(res.stderr.splitlines()[-40:])
            raise AssertionError(f"{' '.join(cmd)}\nexited {res.returncode}; stderr tail:\n{tail}")
        return res
    return run


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def ffmpeg_dir() -> Path:
    d = ffmpeg_dir_path()
    if not (d / "bin" / "ffmpeg").is_file():
        pytest.fail(f"no FFmpeg build at {d}: run ./scripts/setup (or ./scripts/test)")
    return d


@pytest.fixture(scope="session")
def ffmpeg_bin(ffmpeg_dir: Path) -> Path:
    return ffmpeg_dir / "bin" / "ffmpeg"


@pytest.fixture(scope="session")
def ffprobe_bin(ffmpeg_dir: Path) -> Path:
    return ffmpeg_dir / "bin" / "ffprobe"


@pytest.fixture(scope="session")
def run_ffmpeg(ffmpeg_bin: Path):
    """run_ffmpeg(*args, validate=False, check=True, timeout=300) -> CompletedProcess."""
    return _runner(ffmpeg_bin)


@pytest.fixture(scope="session")
def run_ffprobe(ffprobe_bin: Path):
    """run_ffprobe(*args, validate=False, check=True, timeout=300) -> CompletedProcess."""
    return _runner(ffprobe_bin)


@pytest.fixture(scope="session")
def ffmpeg_tarball() -> Path:
    t = find_tarball()
    if t is None:
        pytest.skip(f"{TARBALL_NAME} not at hand (set PYPRORES_FFMPEG_TARBALL)")
    return t


def write_gpu_pack(root: Path, manifest: dict[str, str]) -> Path:
    """A packed directory as tools/gpu/gpu-pack leaves it: per build (name -> its MANIFEST
    note, e.g. "18 patches") stub executables that fail, lib/ and a BUILDINFO."""
    for name in manifest:
        (root / name / "bin").mkdir(parents=True)
        (root / name / "lib").mkdir()
        for exe in ("ffmpeg", "ffprobe", "decbench"):
            p = root / name / "bin" / exe
            p.write_text("#!/bin/sh\nexit 1\n")
            p.chmod(0o755)
        (root / name / "BUILDINFO").write_text("key: abc\npatches:\n  0001-x.patch\nconfigure:\n")
    (root / "MANIFEST").write_text("".join(f"{name}\tabc\t{note}\n" for name, note in manifest.items()))
    return root


def gpu_run(*args: str, out: Path | None = None) -> subprocess.CompletedProcess:
    """tools/gpu/gpu-run ARGS, with $OUT set to out (unset without)."""
    env = {k: v for k, v in os.environ.items() if k != "OUT"}
    if out is not None:
        env["OUT"] = str(out)
    return subprocess.run(["bash", str(REPO_ROOT / "tools" / "gpu" / "gpu-run"), *args], capture_output=True,
                          text=True, env=env, timeout=60)


def faststart_copy(src: Path, out: Path) -> Path:
    """src's video packets remuxed into out (PyAV) with the movie header up front, so that a
    cut into the packets leaves a file whose container still lists every frame."""
    import av

    with av.open(str(out), "w", options={"movflags": "+faststart"}) as o:
        with av.open(str(src)) as i:
            s = o.add_stream_from_template(i.streams.video[0])
            for p in i.demux(i.streams.video[0]):
                if p.size:
                    p.stream = s
                    o.mux(p)
    return out



def prores_mov_claiming(ffmpeg_bin: Path, tmp_path: Path, width: int, height: int) -> Path:
    """A small prores_ks .mov (two 72x40 HQ frames) whose frame headers claim width x height:
    a header the decoder must refuse, or a frame it must not allocate blindly."""
    src = tmp_path / "small.mov"
    subprocess.run([str(ffmpeg_bin), "-v", "error", "-f", "lavfi", "-i", "testsrc2=s=72x40:r=25",
                    "-frames:v", "2", "-c:v", "prores_ks", "-profile:v", "3", str(src)], check=True)
    data = bytearray(src.read_bytes())
    at = data.find(b"icpf")
    assert at > 0
    while at > 0:
        struct.pack_into(">HH", data, at + 12, width, height)
        at = data.find(b"icpf", at + 4)
    out = tmp_path / f"claims-{width}x{height}.mov"
    out.write_bytes(bytes(data))
    return out

def write_mpeg4_mov(path: Path) -> Path:
    """A real two-frame video that is not ProRes (MPEG-4 in .mov), written with PyAV."""
    import av
    import numpy as np

    with av.open(str(path), "w") as c:
        s = c.add_stream("mpeg4", rate=25)
        s.width, s.height, s.pix_fmt = 64, 48, "yuv420p"
        for n in range(2):
            f = av.VideoFrame.from_ndarray(np.zeros((48, 64, 3), np.uint8), "rgb24").reformat(format="yuv420p")
            f.pts = n
            for p in s.encode(f):
                c.mux(p)
        for p in s.encode():
            c.mux(p)
    return path
