"""The mutation fuzzer (pyprores.fuzz, issue 8): a short seeded run over both
decoders in CI, slice isolation under mutation, resource limits and flat
memory, and the harness itself (reproducible mutants, crash and hang
detection, minimisation).

The CI run is a few hundred mutants of the built-in seed set; long runs are
``tools/gpu/fuzz`` (docs/ROBUSTNESS.md). Vulkan decodes run on the fuzzer's
workers, with the validation layer when PYPRORES_VALIDATION=1 (./scripts/test
sets it): a Vulkan session is never closed there, since freeing pool frames
under Debian 12's layer stalls 10 s per frame.
"""

from __future__ import annotations

import json
import os
import resource
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from conftest import KNOWN_LAYER_NOISE, prores_mov_claiming
from pyprores import fuzz
from pyprores.decode import native
from pyprores.bitstream import parse_frame
from pyprores.cli import main as cli_main

HAS_VK = native.available() and native.has_hwaccel("vulkan")
VALIDATE = os.environ.get("PYPRORES_VALIDATION") == "1"
BACKENDS = fuzz.BACKENDS if HAS_VK else ("software",)
REGRESSIONS = Path(__file__).resolve().parent / "data" / "regressions"
CI_SEED = 20261122
CI_COUNT = 300


@pytest.fixture(scope="session")
def seeds(tmp_path_factory, ffmpeg_bin) -> list[fuzz.Seed]:
    paths = fuzz.make_default_seeds(tmp_path_factory.mktemp("fuzz-seeds"), ffmpeg_bin)
    out = fuzz.load_seeds(paths)
    assert len(out) == len(fuzz.DEFAULT_SEED_CLIPS)
    return out


@pytest.fixture(scope="module")
def ci_run(seeds, tmp_path_factory) -> fuzz.Fuzzer:
    """The CI run: CI_COUNT mutants on every backend the build has."""
    cfg = fuzz.FuzzConfig(seed=CI_SEED, count=CI_COUNT, backends=BACKENDS, timeout=60,
                          validation=VALIDATE)
    fz = fuzz.Fuzzer(cfg, seeds, tmp_path_factory.mktemp("fuzz-ci"))
    assert fz.run() == CI_COUNT
    return fz


# ---------------------------------------------------------------------------- mutants

def test_noise_list_is_the_conftest_list():
    assert fuzz.VALIDATION_NOISE == KNOWN_LAYER_NOISE


def test_mutants_are_reproducible(seeds):
    for i in range(40):
        a, b = fuzz.make_mutant(seeds, 7, i), fuzz.make_mutant(seeds, 7, i)
        assert a == b
    assert len({fuzz.make_mutant(seeds, 7, i).data for i in range(40)}) > 35
    assert fuzz.make_mutant(seeds, 7, 3).data != fuzz.make_mutant(seeds, 8, 3).data or \
        fuzz.make_mutant(seeds, 7, 4).data != fuzz.make_mutant(seeds, 8, 4).data


@pytest.mark.parametrize("name", fuzz.MUTATORS)
def test_every_mutator_changes_packets(seeds, name):
    changed = 0
    for i in range(30):
        m = fuzz.make_mutant(seeds, 1, i, (name,))
        assert m.mutator == name
        changed += m.data != seeds[m.seed_index].data
        if name in fuzz.SLICE_MUTATORS:
            # only the chosen slice changed: the rebuilt packet keeps every other slice
            info = parse_frame(m.data, m.tag)
            seed = seeds[m.seed_index]
            p, k = m.slice
            for q, (pa, pb) in enumerate(zip(seed.info.pictures, info.pictures)):
                for sa, sb in zip(pa.slices, pb.slices):
                    a = seed.data[sa.offset:sa.offset + sa.size]
                    b = m.data[sb.offset:sb.offset + sb.size]
                    assert b == (m.slice_data if (q, sa.index) == (p, k) else a)
    assert changed >= 25, f"{name}: only {changed} of 30 mutants differ from their seed"


def test_truncation_covers_every_structure(seeds):
    s = seeds[4]   # interlaced: two pictures
    b = fuzz.boundaries(s)
    hdr = struct.unpack_from(">H", s.data, 8)[0]
    assert 8 + hdr in b and len(s.data) in b
    for pic in s.info.pictures:
        assert pic.offset in b and pic.offset + (s.data[pic.offset] >> 3) + 2 * len(pic.slices) in b
        assert all(sl.offset in b and sl.offset + sl.size in b for sl in pic.slices)


def test_rebuilt_packet_is_what_the_slice_api_decodes(seeds):
    with native.Session("software", threads=1) as s:
        for seed in seeds[:4]:
            new = b"\xff" * 40
            packet = fuzz.rebuild_packet(seed.data, seed.info, 0, 1, new)
            assert fuzz.rebuild_packet(seed.data, seed.info, 0, 1,
                                       seed.data[seed.info.pictures[0].slices[1].offset:][
                                           :seed.info.pictures[0].slices[1].size]) == seed.data
            whole = s.decode(packet, seed.tag)
            info = s.begin_frame(seed.data, seed.tag)
            for p, pic in enumerate(info.pictures):
                for sl in pic.slices:
                    s.submit_slice(p, sl.index, new if (p, sl.index) == (0, 1)
                                   else seed.data[sl.offset:sl.offset + sl.size])
            api = s.end_frame()
            for name in whole.planes:
                assert np.array_equal(whole.planes[name], api.planes[name]), (seed.name, name)


def test_isolation_check_catches_changes_outside_the_slice(seeds):
    seed = seeds[4]                       # tff: slice rows are every other frame row
    with native.Session("software", threads=1) as s:
        base = s.decode(seed.data, seed.tag).planes
    got = {k: v.copy() for k, v in base.items()}
    mask = fuzz.slice_mask(seed.info, 1, 0, "Y", base["Y"].shape)
    assert mask.sum() > 0 and not mask[0].any() and mask[1].any()   # bottom field, first slice
    got["Y"][mask] ^= 1                                              # inside: allowed
    assert fuzz.isolation_violations(seed.info, 1, 0, base, got) == []
    got["Y"][0, 0] ^= 1                                              # top field row 0: outside
    bad = fuzz.isolation_violations(seed.info, 1, 0, base, got)
    assert len(bad) == 1 and "row 0, col 0" in bad[0]


def test_ddmin_keeps_only_the_bytes_that_matter():
    original = bytes(range(200))
    mutant = bytearray(original)
    for i in (3, 17, 50, 51, 120, 199):
        mutant[i] ^= 0xFF
    fails = lambda d: d[50] == original[50] ^ 0xFF and d[120] == original[120] ^ 0xFF  # noqa: E731
    out = fuzz.ddmin_positions(original, bytes(mutant), fails)
    assert [i for i in range(200) if out[i] != original[i]] == [50, 120]


# ---------------------------------------------------------------------------- the CI run

def _findings(fz: fuzz.Fuzzer, kinds: tuple[str, ...]) -> list[str]:
    return [f"{f.kind} {f.backend} #{f.index} {f.mutator} ({f.detail[:80]}): {f.message[:200]}"
            for f in fz.findings if f.kind in kinds]


def test_ci_run_no_crash_no_hang(ci_run):
    for b, st in ci_run.stats.items():
        assert st.mutants == CI_COUNT, b
        assert st.crash == 0 and st.hang == 0 and st.worker_error == 0, \
            _findings(ci_run, ("crash", "hang", "worker-error"))[:5]
        # the mutants do break things, and not everything
        assert st.error >= CI_COUNT // 10 and st.ok + st.corrupt >= CI_COUNT // 4, (b, st)
    used = {m for m, c in ci_run.by_mutator.items() if sum(c.values())}
    assert used == set(fuzz.MUTATORS)


def test_ci_run_no_sanitizer_report(ci_run):
    assert all(st.sanitizer_reports == 0 for st in ci_run.stats.values()), \
        _findings(ci_run, ("sanitizer",))[:5]


@pytest.mark.skipif(not HAS_VK, reason="this FFmpeg build has no prores_vulkan hwaccel")
def test_ci_run_validation(ci_run):
    w = ci_run.workers["vulkan"]
    if VALIDATE:
        # FFmpeg 9 on Debian 12's old layer: left off, and the session says why (csrc/README.md)
        assert w.validation_enabled or "VK_EXT_host_image_copy" in w.note, \
            f"PYPRORES_VALIDATION=1 but the Vulkan worker runs without the layer ({w.note!r})"
    messages = _findings(ci_run, ("validation",))
    assert not messages, messages[:5]


def test_ci_run_slice_isolation(ci_run):
    for b, st in ci_run.stats.items():
        assert st.isolation_checked >= CI_COUNT // 5, (b, st)
        assert st.isolation_failed == 0, _findings(ci_run, ("isolation",))[:5]
    assert not _findings(ci_run, ("seed-failed",))


@pytest.mark.skipif(not HAS_VK, reason="this FFmpeg build has no prores_vulkan hwaccel")
def test_ci_run_damage_agreement(ci_run):
    """Issues 19 and 35: a mutant has the same outcome on both decoders (out
    intact, out flagged corrupt, or refused); where both flag it corrupt, both
    name the same concealed slices."""
    d = ci_run.damage
    assert d["checked"] >= CI_COUNT * 9 // 10, d
    assert d.get("disagree", 0) == 0, _findings(ci_run, ("damage",))[:5]
    assert d["slice_sets_checked"] >= CI_COUNT // 10, d
    assert d["slice_sets_equal"] == d["slice_sets_checked"], _findings(ci_run, ("slices",))[:5]


def test_damage_oracle_counts_a_refusal_against_a_frame_out(tmp_path):
    """Issue 35: a frame one decoder refuses and the other outputs, flagged or
    not, is a disagreement (the oracle used to call a refusal and a flagged
    frame alike); only the same outcome on both is agreement."""
    fz = fuzz.Fuzzer(fuzz.FuzzConfig(count=0), [], tmp_path)
    m = fuzz.Mutant(0, "seed", "apch", "index_entry", "index[4] 0xffff", b"")
    pairs = [("error", "corrupt", False), ("corrupt", "error", False), ("error", "ok", False),
             ("ok", "corrupt", False), ("ok", "ok", True), ("corrupt", "corrupt", True), ("error", "error", True)]
    for i, (sw, vk, _) in enumerate(pairs):
        assert fuzz.damage_agrees(sw, vk) == pairs[i][2]
        fz._damage(i, m, fuzz.Reply(sw), fuzz.Reply(vk))
    assert (fz.damage["checked"], fz.damage["agree"], fz.damage["disagree"]) == (7, 3, 4)
    assert [f.index for f in fz.findings if f.kind == "damage"] == [i for i, p in enumerate(pairs) if not p[2]]


@pytest.mark.skipif(not HAS_VK, reason="this FFmpeg build has no prores_vulkan hwaccel")
def test_known_refusal_agrees_through_the_oracle(tmp_path):
    """Issue 35's packet (a slice index entry of 0xffff) through both fuzz
    workers and the oracle: the software decoder refuses it, and so must the
    hwaccel. On the 7.1.5 series before the fix the hwaccel output it
    flagged, which this counts as a disagreement."""
    data = (REGRESSIONS / "refuse-index-ffff-hq422-72x40.bin").read_bytes()
    fz = fuzz.Fuzzer(fuzz.FuzzConfig(count=0, validation=False), [], tmp_path)
    m = fuzz.Mutant(0, "refuse-index-ffff", "apch", "index_entry", "index[4] 0xffff", data)
    try:
        for w in fz.workers.values():
            w.start()
        sw, vk = (fz._decode(b, m, planes=False) for b in ("software", "vulkan"))
        fz._damage(0, m, sw, vk)
    finally:
        fz.close()
    assert sw.status == "error", sw
    assert dict(fz.damage) == {"checked": 1, "agree": 1}, (vk.status, vk.message)


def test_ci_run_summary(ci_run, tmp_path):
    report = fuzz.FuzzReport(
        command="test", date="2026-11-22", machine="ci", seed=CI_SEED, seeds=[s.name for s in ci_run.seeds],
        seeds_digest=fuzz.seeds_digest(ci_run.seeds), backends=ci_run.stats,
        devices={b: "?" for b in ci_run.stats}, validation={b: False for b in ci_run.stats},
        sanitizer_build=False, libavcodec={}, mutants=CI_COUNT, seconds=1.0,
        by_mutator={k: dict(v) for k, v in ci_run.by_mutator.items()},
        outcome_pairs=dict(ci_run.pairs), findings=ci_run.findings, damage=dict(ci_run.damage))
    j, md = fuzz.write_reports(report, tmp_path / "run")
    doc = json.loads(j.read_text())
    assert doc["backends"]["software"]["mutants"] == CI_COUNT
    assert "| software | 300 |" in md.read_text()


# ---------------------------------------------------------------------------- the harness

def test_crash_and_hang_are_recorded_and_the_run_goes_on(seeds, tmp_path):
    cfg = fuzz.FuzzConfig(seed=3, count=8, backends=("software",), timeout=3, minimise=False,
                          inject={2: "selftest-crash", 5: "selftest-hang", 6: "selftest-stderr"})
    fz = fuzz.Fuzzer(cfg, seeds, tmp_path)
    assert fz.run() == 8
    st = fz.stats["software"]
    assert st.mutants == 8 and st.crash == 1 and st.hang == 1 and st.worker_restarts >= 2
    assert st.sanitizer_reports == 1            # what the worker wrote to its stderr is scanned
    crash = next(f for f in fz.findings if f.kind == "crash")
    hang = next(f for f in fz.findings if f.kind == "hang")
    assert (crash.index, crash.signal) == (2, 11) and hang.index == 5
    assert st.ok + st.corrupt + st.error == 6       # the others were decoded after the restarts
    assert fz.workers["software"].libavcodec.endswith(".so.61") or "libavcodec" in fz.workers["software"].libavcodec


def test_cli_fuzz_and_reproduce(tmp_path, capsys):
    out = tmp_path / "summary"
    rc = cli_main(["fuzz", "--count", "30", "--backend", "software", "--seed", "5",
                   "--workdir", str(tmp_path / "w"), "--out", str(out)])
    text = capsys.readouterr().out
    assert rc == 0, text
    assert "| software | 30 |" in text and "PASS" in text
    doc = json.loads(out.with_suffix(".json").read_text())
    assert doc["passed"] and doc["backends"]["software"]["mutants"] == 30
    assert rc == 0
    saved = tmp_path / "m.bin"
    assert cli_main(["fuzz", "--seed", "5", "--reproduce", "17", "--save", str(saved),
                     "--workdir", str(tmp_path / "w2")]) == 0
    seeds = fuzz.load_seeds(sorted((tmp_path / "w2" / "seeds").glob("*.mov"),
                                   key=lambda p: [c[0] for c in fuzz.DEFAULT_SEED_CLIPS].index(p.stem)))
    assert saved.read_bytes() == fuzz.make_mutant(seeds, 5, 17).data


# ---------------------------------------------------------------------------- resource limits

LIMITS_CHILD = textwrap.dedent("""
    import json, resource, struct, sys
    from pyprores.decode import native
    from pyprores.errors import DecodeError
    from pyprores.fuzz.worker import memory_kib
    packet, tag = open(sys.argv[1], "rb").read(), sys.argv[2]
    s = native.Session("software", threads=1)
    s.decode(packet, tag)
    before = memory_kib()
    # address space: what the process has now plus 256 MiB; any frame-sized
    # allocation for these headers (>= 2 GiB) fails
    resource.setrlimit(resource.RLIMIT_AS, ((before["VmSize"] + 256 * 1024) * 1024,) * 2)
    out = {}
    for w, h in ((65535, 65535), (16000, 16000), (16384, 8192), (65535, 40), (8192, 4320)):
        p = bytearray(packet)
        struct.pack_into(">HH", p, 16, w, h)
        try:
            s.decode(bytes(p), tag)
            out[f"{w}x{h}"] = "decoded"
        except DecodeError as e:
            out[f"{w}x{h}"] = "DecodeError: " + str(e)
        except MemoryError as e:
            out[f"{w}x{h}"] = "MemoryError: " + str(e)
    out["rss_growth_kib"] = memory_kib()["VmHWM"] - before["VmHWM"]
    print(json.dumps(out))
""")


def test_huge_headers_are_refused_before_allocating(seeds, tmp_path):
    """Frame headers claiming up to 65535x65535 in a 2 KB packet: refused with
    a clean error under an address-space limit that no such frame fits in."""
    seed = seeds[0]
    (tmp_path / "p.bin").write_bytes(seed.data)
    res = subprocess.run([sys.executable, "-c", LIMITS_CHILD, str(tmp_path / "p.bin"), seed.tag],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    out = json.loads(res.stdout)
    for size in ("65535x65535", "16000x16000", "16384x8192", "65535x40", "8192x4320"):
        assert out[size].startswith("DecodeError"), (size, out[size])
    assert "invalid picture size" in out["65535x65535"]
    assert "slice index" in out["16000x16000"]
    assert out["rss_growth_kib"] < 16 * 1024, out


@pytest.mark.skipif(not HAS_VK, reason="this FFmpeg build has no prores_vulkan hwaccel")
def test_huge_headers_on_vulkan_are_refused(seeds, tmp_path):
    """A header claiming a huge frame in a packet that cannot hold the first
    picture's slice index is refused before any frame-sized allocation, on
    the Vulkan path too: by ppr_inspect_header before the output planes, and
    by FFmpeg's decoder (series patch 11) before the frame (a Vulkan image)
    is allocated. Peak address space and peak RSS grow by less than 64 MiB
    (a 8192x4320 4:2:2 10-bit frame alone is 135 MiB)."""
    seed = seeds[0]
    w = fuzz.Worker("vulkan", None, tmp_path, False)
    try:
        # open the session and its decoder first: device creation maps memory
        r = w.request({"op": "decode", "data": seed.data, "tag": seed.tag, "planes": False}, 300)
        assert r.status == "ok", r.message
        for size in ((16000, 16000), (8192, 4320), (65535, 65535)):
            # the worker asks to be recycled after a frame this size: measure within one process
            before = w.request({"op": "memory"}, 120).extra["memory"]
            p = bytearray(seed.data)
            struct.pack_into(">HH", p, 16, *size)
            r = w.request({"op": "decode", "data": bytes(p), "tag": seed.tag, "planes": False}, 300)
            assert r.status == "error", (size, r.status, r.message)
            after = r.extra["memory"]
            assert after["VmHWM"] - before["VmHWM"] < 64 * 1024, (size, before, after)
            assert after["VmPeak"] - before["VmPeak"] < 64 * 1024, (size, before, after)
    finally:
        w.stop()


@pytest.mark.skipif(not HAS_VK, reason="this FFmpeg build has no prores_vulkan hwaccel")
def test_ffmpeg_hwaccel_refuses_huge_header_before_allocating(tmp_path, ffmpeg_bin):
    """`ffmpeg -hwaccel vulkan` on a .mov whose frame headers claim
    16000x16000 (the slice index cannot fit): proresdec refuses the packet
    before it allocates the frame (series patch 11), so even under a 1.5 GiB
    address-space limit the error is the slice count, not a failed
    allocation of a 16000x16000 Vulkan image."""
    huge = prores_mov_claiming(ffmpeg_bin, tmp_path, 16000, 16000)

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (1536 << 20,) * 2)

    res = subprocess.run([str(ffmpeg_bin), "-hide_banner", "-v", "error", "-init_hw_device", "vulkan=vk:0",
                          "-hwaccel", "vulkan", "-hwaccel_output_format", "vulkan", "-i", str(huge),
                          "-f", "null", "-"], capture_output=True, text=True, timeout=120,
                         preexec_fn=limit)
    assert res.returncode != 0
    assert "wrong slice count" in res.stderr, res.stderr[-1500:]
    assert "get_buffer() failed" not in res.stderr and "Cannot allocate memory" not in res.stderr


@pytest.mark.parametrize("backend,n", [("software", 2000), pytest.param(
    "vulkan", 300, marks=pytest.mark.skipif(not HAS_VK, reason="no prores_vulkan hwaccel"))])
def test_memory_stays_flat(seeds, tmp_path, backend, n):
    """RSS over n decodes of one packet (and of a damaged one) after warm-up."""
    seed = seeds[2]                                   # 4:4:4 + 16-bit alpha
    damaged = fuzz.make_mutant(seeds, 11, 0, ("slice_garbage",))
    w = fuzz.Worker(backend, None, tmp_path, VALIDATE and backend == "vulkan")
    try:
        for data in (seed.data, fuzz.rebuild_packet(seeds[damaged.seed_index].data,
                                                    seeds[damaged.seed_index].info,
                                                    *damaged.slice, damaged.slice_data)):
            tag = seed.tag if data is seed.data else damaged.tag
            r = w.request({"op": "rss-run", "data": data, "tag": tag, "n": n, "every": n // 10}, 600,
                          fuzz.stream_key(data, tag))
            samples = r.extra["samples"]
            assert r.status == "ok" and len(samples) == 10, r.message
            growth = samples[-1] - samples[1]
            assert growth < 4 * 1024, f"{backend}: RSS grew {growth} KiB over {n} decodes: {samples}"
            assert r.validation == []
    finally:
        w.stop()
