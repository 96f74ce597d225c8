"""tools/gpu/probes/bwprobe.c, the transfer bandwidth probe of issue 20, and gpu-run's bandwidth step that
runs it. Compiled as tools/gpu/gpu-pack compiles it (against the vendored Vulkan headers) and run on
lavapipe with tiny sizes, under the validation layer when the suite asks for it: a few seconds."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest

from conftest import c_compiler, gpu_run, load_script, validation_messages, vulkan_env

REPO = Path(__file__).resolve().parent.parent
SIZES = [65536, 100003]             # one size not a multiple of the 7680-byte row
FRAME = (64, 16)
THREADS = [1, 2]
REPS = 2
CLASSES = ("cached_coherent", "cached", "coherent")


@pytest.fixture(scope="module")
def pack(tmp_path_factory) -> Path:
    """A pack directory with bwprobe/bwprobe built by gpu-pack's own function."""
    cc = c_compiler()
    gp = load_script("gpu-pack")
    root = tmp_path_factory.mktemp("gpu")
    old = os.environ.get("CC")
    os.environ["CC"] = cc
    try:
        gp.pack_bwprobe(root / "bwprobe", gp.vulkan_include(), dry=False)
    finally:
        if old is None:
            os.environ.pop("CC")
        else:
            os.environ["CC"] = old
    return root


@pytest.fixture(scope="module")
def probe(pack: Path) -> Path:
    return pack / "bwprobe" / "bwprobe"


@pytest.fixture(scope="module")
def report(probe: Path) -> tuple[dict, str]:
    """One --json run: the JSON and the table (stderr); validation-clean where asked."""
    args = [str(probe), "--json", "--sizes", ",".join(map(str, SIZES)), "--reps", str(REPS),
            "--frames", "%dx%d" % FRAME, "--threads", ",".join(map(str, THREADS))]
    res = subprocess.run(args, capture_output=True, text=True, timeout=60, env=vulkan_env(validate=True))
    assert res.returncode == 0, res.stderr[-3000:]
    # the layer writes to stdout: a message there would also spoil the JSON
    assert validation_messages(res.stdout + res.stderr) == [], (res.stdout + res.stderr)[-3000:]
    return json.loads(res.stdout), res.stderr


def test_compiles_without_warnings(tmp_path: Path):
    gp = load_script("gpu-pack")
    subprocess.run([c_compiler(), "-O2", "-Wall", "-Wextra", "-Werror", f"-I{gp.vulkan_include()}", "-o",
                    str(tmp_path / "bwprobe"), str(REPO / "tools" / "gpu" / "probes" / "bwprobe.c"), "-ldl", "-lpthread"],
                   check=True)


def good(stats: dict | None) -> bool:
    return (stats is not None and set(stats) == {"median_s", "min_s", "median_gbps", "best_gbps"}
            and all(math.isfinite(v) and v > 0 for v in stats.values())
            and stats["min_s"] <= stats["median_s"] and stats["best_gbps"] >= stats["median_gbps"])


def test_device_description(report):
    j, _ = report
    assert j["tool"] == "bwprobe"
    d = j["device"]
    for key in ("index", "name", "vendor_id", "device_id", "device_type", "api_version", "driver_version",
                "driver_version_str", "driver_name", "driver_info", "timestamp_period_ns",
                "optimal_buffer_copy_offset_alignment", "optimal_buffer_copy_row_pitch_alignment",
                "non_coherent_atom_size"):
        assert key in d, key
    assert d["index"] == 0 and d["name"] and d["timestamp_period_ns"] > 0
    assert d["device_type"] in ("OTHER", "INTEGRATED_GPU", "DISCRETE_GPU", "VIRTUAL_GPU", "CPU")
    assert j["memory_heaps"] and all(h["size"] > 0 and isinstance(h["flag_names"], list) for h in j["memory_heaps"])
    assert j["memory_types"] and all(0 <= t["heap"] < len(j["memory_heaps"]) for t in j["memory_types"])
    assert j["queue_families"] and all(f["count"] > 0 and "timestamp_valid_bits" in f and
                                       len(f["min_image_transfer_granularity"]) == 3 for f in j["queue_families"])
    roles = [q["role"] for q in j["queues"]]
    assert roles[-1] == "compute" and roles in (["compute"], ["transfer", "compute"])
    assert set(j["memory_classes"]) == set(CLASSES)
    assert any(t is not None for t in j["memory_classes"].values())
    assert j["reps"] == REPS and j["warmups"] == 2 and j["row_bytes"] == 7680 and j["threads"] == THREADS
    assert j["host_reps"] == 5 and j["cold"] is False
    assert j["nproc"] >= 1


def test_device_copies(report):
    j, _ = report
    classes = [c for c in CLASSES if j["memory_classes"][c] is not None]
    queues = {q["role"]: q for q in j["queues"]}
    copies = j["buffer_copies"]
    assert len(copies) == len(SIZES) * len(classes) * len(queues) * 2
    assert {(c["bytes"], c["direction"], c["memory"], c["queue"]) for c in copies} == {
        (s, d, m, q) for s in SIZES for d in ("d2h", "h2d") for m in classes for q in queues}
    for c in copies:
        assert c["memory_type"] == j["memory_classes"][c["memory"]]
        assert c["family"] == queues[c["queue"]]["family"]
        assert good(c["wall"]), c
        assert good(c["gpu"]) if queues[c["queue"]]["timestamps"] else c["gpu"] is None, c

    images = j["image_copies"]
    cached = [c for c in ("cached_coherent", "cached") if j["memory_classes"][c] is not None]
    to_host = [c for c in images if c["direction"] == "d2h"]
    to_device = [c for c in images if c["direction"] == "d2d"]
    assert len(to_host) == len(cached) * len(queues) and len(to_host) + len(to_device) == len(images)
    # the copy into device memory (what CUDA output costs per frame) once on every queue
    assert sorted(c["queue"] for c in to_device) == sorted(queues)
    w, h = FRAME
    for c in images:
        assert c["frame"] == "%dx%d" % FRAME
        assert c["bytes"] == w * h * 2 + 2 * (w // 2) * h * 2
        assert c["planes"] == [[w, h], [w // 2, h], [w // 2, h]]
        assert "TRANSFER_SRC" in c["image_usage"]
        if c["direction"] == "d2h":
            assert c["memory"] in cached
        else:
            assert c["memory"] == "device" and c["memory_type"] == j["device_local_type"]
        assert good(c["wall"]), c
        assert good(c["gpu"]) if queues[c["queue"]]["timestamps"] else c["gpu"] is None, c


def test_host_copies(report):
    j, _ = report
    methods = ["rows", "whole"] + (["stream"] if j["stream_stores"] else [])
    sources = (["staging"] if j["staging_class"] else []) + ["malloc"]
    host = j["host_copies"]
    assert sorted((c["bytes"], c["source"], c["method"], c["threads"]) for c in host) == sorted(
        (s, src, m, t) for s in SIZES for src in sources for m in methods for t in THREADS)
    assert all(good(c["wall"]) for c in host), host


def test_table(report):
    _, table = report
    assert table.startswith("bwprobe: device 0: ")
    for heading in ("buffer copies: vkCmdCopyBuffer", "image copies: vkCmdCopyImageToBuffer", "host copies"):
        assert heading in table
    assert "%dx%d" % FRAME in table and "staging  rows" in table


@pytest.mark.parametrize("args, message", [
    (["--sizes", "0"], "--sizes: 0 is out of range"),
    (["--sizes", "12abc"], "--sizes: '12abc' is not a whole number"),
    (["--sizes", "-5"], "is not a whole number"),
    (["--sizes", "1,,2"], "is not a comma-separated list"),
    (["--sizes", "99999999999999999999999"], "out of range"),
    (["--sizes"], "--sizes needs a value"),
    (["--reps", "0"], "--reps: 0 is out of range"),
    (["--threads", "1,0"], "--threads: 0 is out of range"),
    (["--frames", "63x16"], "the width of 63x16 is odd"),
    (["--frames", "64"], "is not WxH"),
    (["--device", "x"], "is not a whole number"),
    (["--bogus"], "unknown argument '--bogus'"),
])
def test_bad_arguments_are_refused(probe: Path, args: list[str], message: str):
    res = subprocess.run([str(probe), *args], capture_output=True, text=True, timeout=30)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.startswith("bwprobe: ") and message in res.stderr, res.stderr


def test_missing_device_is_an_error(probe: Path):
    res = subprocess.run([str(probe), "--device", "99", "--sizes", "4096", "--frames", "none"],
                         capture_output=True, text=True, timeout=30)
    assert res.returncode == 1 and res.stdout == ""
    assert "bwprobe: error: no Vulkan device 99" in res.stderr


def test_help(probe: Path):
    res = subprocess.run([str(probe), "--help"], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0 and res.stdout.startswith("usage: bwprobe ")


def test_gpu_run_bandwidth_step(pack: Path, tmp_path: Path):
    """The step as the main loop starts it (--step, the GR_* environment), on lavapipe with tiny
    sizes: the JSON, the table and the CPUs in the log, a summary line per size."""
    out = tmp_path / "out"
    out.mkdir()
    env = dict(os.environ, GR_PACK=str(pack), GR_DEVICE="0", OUT=str(out),
               GR_BW_ARGS="--sizes 65536 --reps 2 --frames 64x16 --threads 1")
    res = subprocess.run(["bash", str(REPO / "tools" / "gpu" / "gpu-run"), "--step", "bandwidth"], capture_output=True,
                         text=True, env=env, timeout=60)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    j = json.loads((out / "bandwidth.json").read_text())
    assert j["reps"] == 2 and {c["bytes"] for c in j["buffer_copies"]} == {65536}
    assert "nproc: " in res.stdout and "bwprobe: device 0: " in res.stderr
    assert "bandwidth 65536 B, best medians: d2h " in res.stdout
    assert "bandwidth 65536 B, host copies, GB/s with 1 threads: from staging: rows " in res.stdout
    assert "bandwidth 4096 B, best medians: image 64x16 d2h " in res.stdout


def test_gpu_run_lists_the_bandwidth_step():
    """gpu-run's help names the step (tests/test_gpu_scripts.py checks its plan)."""
    help_text = gpu_run("--help").stdout
    assert "bandwidth      issue 20" in help_text and "--bandwidth-args" in help_text


def test_pack_reserves_the_name(tmp_path: Path):
    gp = load_script("gpu-pack")
    assert gp.main(["--out", str(tmp_path / "g"), "--dry-run", "bwprobe=/x"]) == 2
