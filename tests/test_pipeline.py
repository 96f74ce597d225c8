"""pyprores.decode.pipeline: compare's candidate frames with several in flight (issue 21).

What compare_file gets from CandidateFrames must be, item for item, what the
one-frame path (Session.decode, one packet per call) gives: the same frames in
the same order, the same errors at the same frame, and every concealment report
from a decode of that frame's own packet.

The first part drives the pipeline with a fake streaming session (pure Python,
fast) whose decoder misbehaves in every way the pipeline guards against: frames
flagged damaged in the stream, frames it never returns, frames with a pts of no
packet, errors at send and at receive, a decoder that is full; a randomised
run mixes them. The second part runs the real Vulkan session on lavapipe:
damaged slices from tests/data/regressions/ mid-stream, frame order with
1-8 frames in flight, a size change, early exit, and the compare report with
and without frames in flight, byte for byte.
"""

from __future__ import annotations

import json
import os
import random
from collections import deque
from pathlib import Path

import av
import numpy as np
import pytest

from pyprores.corpus import clips
from pyprores.decode import demux, native, pipeline
from pyprores.cli import main
from pyprores.check.compare import compare_file
from pyprores.errors import DecodeError
from pyprores.model import Frame, FrameInfo
from pyprores.decode.pipeline import CandidateFrames

HAS_VK = native.available() and native.has_hwaccel("vulkan")
needs_vk = pytest.mark.skipif(not HAS_VK, reason="this FFmpeg build has no prores_vulkan hwaccel")
REGRESSIONS = Path(__file__).resolve().parent / "data" / "regressions"
SIZE_CHANGE = REGRESSIONS / "size-change-72x40-200x100.mov"


# -- a fake streaming session ------------------------------------------------------
#
# A packet is b"<index>:<tags>", tags among
#   ref   the reference decoder flags the frame (the pipeline does not stream it)
#   flag  the candidate flags it: the streamed frame is corrupt, with no slice list
#         (as the Vulkan stream), the one-frame decode lists slice (0, index)
#   drop  the stream returns no frame for it          pts   the stream's frame has pts + 100
#   rerr  the stream's receive fails on it             serr  sending it fails
#   hdr   the header parser refuses it (both paths)    dec   the decoder fails on it (both paths)
#   fmt   the stream returns another pixel format

def packet(i: int, *tags: str) -> bytes:
    return f"{i}:{','.join(tags)}".encode()


def parse(p: bytes) -> tuple[int, set[str]]:
    i, tags = p.decode().split(":")
    return int(i), set(filter(None, tags.split(",")))


def planes_of(i: int) -> dict[str, np.ndarray]:
    return {"Y": np.full((2, 4), i, np.uint16), "Cb": np.full((2, 2), i, np.uint16),
            "Cr": np.full((2, 2), i, np.uint16)}


class FakeSession:
    """native.Session's interface (inspect, decode, the streaming calls) over fake packets."""

    backend = "vulkan"
    device_name = "fake"

    def __init__(self, slots: int = 4) -> None:
        self.slots = slots
        self.validation_messages: list[str] = []
        self.calls: list[str] = []
        self.decoder: deque = deque()      # (pts, packet) in the decoder
        self.ended = False
        self.configured = 0

    def inspect(self, p: bytes, tag: str) -> FrameInfo:
        i, tags = parse(p)
        self.calls.append(f"inspect {i}")
        if "hdr" in tags:
            raise DecodeError(f"header of {i} refused")
        return FrameInfo(width=4, height=2, chroma_format="422", bit_depth=10, pix_fmt="yuv422p10le",
                         alpha_info=0, interlace_mode=0)

    def decode(self, p: bytes, tag: str) -> Frame:
        i, tags = parse(p)
        self.calls.append(f"decode {i}")
        self.decoder.clear()               # the one-frame decode reopens the decoder
        self.ended = False
        if "dec" in tags:
            raise DecodeError(f"frame {i} cannot be decoded")
        corrupt = bool(tags & {"flag", "ref"})
        return Frame(planes_of(i), "yuv422p10le", 10, corrupt=corrupt, extra={"backend": "vulkan"},
                     error_flags=int(corrupt), concealed=((0, i),) if corrupt else ())

    # streaming
    def stream_config(self, max_in_flight: int, err_detect: bool = True) -> None:
        assert err_detect and not self.decoder
        self.configured += 1

    def stream_reset(self) -> None:
        self.decoder.clear()
        self.ended = False

    def send_packet(self, p: bytes | None, tag: str = "apch", pts: int | None = None) -> bool:
        if p is None:
            self.ended = True
            return True
        i, tags = parse(p)
        if self.ended and self.decoder:
            return False                   # draining: receive first
        self.ended = False
        if len(self.decoder) > self.slots:
            return False
        if "serr" in tags:
            raise DecodeError(f"could not send {i}")
        self.calls.append(f"send {i}")
        self.decoder.append((pts, p))
        return True

    def receive_frame(self):
        while self.decoder and (self.ended or len(self.decoder) >= self.slots):
            pts, p = self.decoder.popleft()
            i, tags = parse(p)
            if "drop" in tags:
                continue
            if tags & {"rerr", "dec"}:
                raise DecodeError(f"stream failed on {i}")
            fmt = "yuv444p10le" if "fmt" in tags else "yuv422p10le"
            frame = Frame(planes_of(i), fmt, 10, corrupt="flag" in tags, extra={"backend": "vulkan"},
                          error_flags=int("flag" in tags), concealed=None if "flag" in tags else ())
            return native.StreamFrame(pts=pts + (100 if "pts" in tags else 0), frame=frame)
        return None


class Reader:
    """(packet, reference) pairs that count what was read; ``fail_at`` raises there."""

    def __init__(self, packets: list[bytes], fail_at: int | None = None) -> None:
        self.packets, self.fail_at, self.read, self.closed = packets, fail_at, 0, False

    def __iter__(self):
        try:
            for n, p in enumerate(self.packets):
                if n == self.fail_at:
                    raise DecodeError(f"reading stopped at {n}")
                self.read += 1
                i, tags = parse(p)
                yield p, Frame(planes_of(i), "yuv422p10le", 10, corrupt="ref" in tags)
        finally:
            self.closed = True


def one_frame_path(packets: list[bytes], fail_at: int | None = None, limit: int | None = None) -> list:
    """What a serial loop gets: per frame the candidate's frame or error; then the read error."""
    out: list = []
    s = FakeSession()
    for n, p in enumerate(packets):
        if limit is not None and n >= limit:
            break
        if n == fail_at:
            out.append(("read error", f"reading stopped at {n}"))
            break
        try:
            s.inspect(p, "apch")
            f = s.decode(p, "apch")
        except DecodeError as e:
            out.append((n, "error", str(e)))
            break
        out.append((n, int(f.planes["Y"][0, 0]), f.pix_fmt, f.corrupt, f.concealed))
    return out


def through_pipeline(packets: list[bytes], fail_at: int | None = None, limit: int | None = None,
                     in_flight: int = 4, slots: int = 4) -> tuple[list, CandidateFrames, FakeSession, Reader]:
    s = FakeSession(slots)
    reader = Reader(packets, fail_at)
    cf = CandidateFrames(s, iter(reader), "apch", limit=limit, max_in_flight=in_flight)
    out: list = []
    try:
        for item in cf:
            assert item.reference.planes["Y"][0, 0] == item.index
            if item.error is not None:
                out.append((item.index, "error", str(item.error)))
                break
            f = item.candidate
            out.append((item.index, int(f.planes["Y"][0, 0]), f.pix_fmt, f.corrupt, f.concealed))
    except DecodeError as e:
        out.append(("read error", str(e)))
    finally:
        cf.close()
    return out, cf, s, reader


def test_clean_stream_is_streamed_in_order():
    packets = [packet(i) for i in range(20)]
    got, cf, s, reader = through_pipeline(packets)
    assert got == one_frame_path(packets)
    assert cf.stats == {"streamed": 20, "serial": 0, "redecoded": 0, "stream_failures": 0}
    assert not any(c.startswith("decode") for c in s.calls) and s.configured == 1
    assert reader.closed and not s.decoder


@pytest.mark.parametrize("tags", [("flag",), ("ref",), ("drop",), ("pts",), ("rerr",), ("serr",),
                                  ("fmt",), ("flag", "dec"), ("rerr", "dec"), ("serr", "dec"),
                                  ("drop", "dec"), ("hdr",)])
@pytest.mark.parametrize("at", [0, 5, 11])
def test_each_fault_gives_the_one_frame_result(tags, at):
    """A frame the stream cannot be trusted with is decoded alone: same frame,
    same error, and a concealment list from its own packet."""
    packets = [packet(i, *tags) if i == at else packet(i) for i in range(12)]
    got, cf, s, reader = through_pipeline(packets)
    assert got == one_frame_path(packets)
    if "flag" in tags and "dec" not in tags:
        assert got[at][3:] == (True, ((0, at),))   # the report of this frame's own packet
        assert cf.stats["redecoded"] == 1
    if "ref" in tags:
        assert f"send {at}" not in s.calls and f"decode {at}" in s.calls
    if len(got) == 12:                      # the others still stream (those in flight with it may not)
        assert cf.stats["serial"] <= cf.max_in_flight + 3 and cf.stats["streamed"] >= 12 - 7
    assert reader.closed and not s.decoder


def test_frames_in_flight_are_received_before_a_one_frame_decode():
    """The one-frame decode reopens the session's decoder: every frame sent
    before it is received first, none is lost or given to another item."""
    packets = [packet(i, "ref") if i == 6 else packet(i) for i in range(14)]
    got, cf, s, _ = through_pipeline(packets, slots=3)
    assert got == one_frame_path(packets)
    at = s.calls.index("decode 6")
    assert all(f"send {i}" in s.calls[:at] for i in range(6))
    assert cf.stats["streamed"] == 13 and cf.stats["serial"] == 1


def test_many_damaged_frames_go_one_frame_per_call():
    packets = [packet(i, "ref") if i % 3 == 1 else packet(i) for i in range(30)]
    got, cf, s, _ = through_pipeline(packets)
    assert got == one_frame_path(packets)
    sends = [c for c in s.calls if c.startswith("send")]
    assert len(sends) < 6, s.calls         # it stopped streaming after a few interruptions


@pytest.mark.parametrize("in_flight", [1, 4])
def test_reading_stops_at_the_limit_and_at_the_first_failure(in_flight):
    packets = [packet(i) for i in range(20)]
    got, _, _, reader = through_pipeline(packets, limit=7, in_flight=in_flight)
    assert got == one_frame_path(packets, limit=7) and reader.read == 7
    packets[4] = packet(4, "hdr")
    got, _, _, reader = through_pipeline(packets, in_flight=in_flight)
    assert got == one_frame_path(packets) and got[-1] == (4, "error", "header of 4 refused")
    assert reader.read == 5


@pytest.mark.parametrize("in_flight", [1, 4])
def test_a_read_error_comes_after_the_frames_before_it(in_flight):
    packets = [packet(i) for i in range(10)]
    got, _, s, reader = through_pipeline(packets, fail_at=6, in_flight=in_flight)
    assert got == one_frame_path(packets, fail_at=6)
    assert got[-1] == ("read error", "reading stopped at 6") and len(got) == 7
    packets[3] = packet(3, "dec")          # a candidate error before it wins, as in a serial loop
    got, _, _, _ = through_pipeline(packets, fail_at=6, in_flight=in_flight)
    assert got[-1] == (3, "error", "frame 3 cannot be decoded")


def test_one_frame_path_keeps_the_serial_order_of_calls():
    """max_in_flight 1 (or a session that cannot stream): read, inspect, decode, frame by frame."""
    packets = [packet(i) for i in range(4)]
    _, cf, s, _ = through_pipeline(packets, in_flight=1)
    assert s.calls == [f"{c} {i}" for i in range(4) for c in ("inspect", "decode")]
    assert cf.stats["serial"] == 4 and s.configured == 0

    class Plain:                            # PyAVSession-like: inspect and decode only
        backend = "vulkan"
        inspect, decode = FakeSession.inspect, FakeSession.decode

        def __init__(self):
            self.calls, self.decoder = [], deque()
    p = Plain()
    items = list(CandidateFrames(p, iter(Reader(packets)), "apch"))
    assert [i.index for i in items] == [0, 1, 2, 3] and not any(i.streamed for i in items)


def test_early_exit_drops_the_frames_in_flight():
    packets = [packet(i) for i in range(20)]
    s = FakeSession()
    reader = Reader(packets)
    cf = CandidateFrames(s, iter(reader), "apch")
    for item in cf:
        if item.index == 2:
            assert s.decoder                # frames in flight
            break
    cf.close()
    assert not s.decoder and reader.closed and reader.read <= 2 + cf.max_in_flight + 2


def test_random_faults_never_misattribute():
    """Randomised: any mix of faults, decoder sizes and frames in flight gives
    the one-frame path's result exactly."""
    rng = random.Random(21)
    faults = ["flag", "ref", "drop", "pts", "rerr", "serr", "fmt", "dec", "hdr"]
    for trial in range(300):
        n = rng.randint(1, 30)
        rate = rng.choice([0.02, 0.1, 0.3])
        packets = [packet(i, *rng.sample(faults, rng.randint(1, 2))) if rng.random() < rate else packet(i)
                   for i in range(n)]
        fail_at = rng.choice([None, None, rng.randrange(n)])
        limit = rng.choice([None, None, rng.randint(1, n)])
        in_flight, slots = rng.randint(1, 8), rng.randint(1, 8)
        got, cf, s, reader = through_pipeline(packets, fail_at, limit, in_flight, slots)
        assert got == one_frame_path(packets, fail_at, limit), (trial, packets, fail_at, limit, in_flight, slots)
        assert reader.closed and not s.decoder
        if limit is not None:
            assert reader.read <= limit


# -- the real session on lavapipe ------------------------------------------------------

def _mux(path: Path, packets: list[bytes], template: Path) -> Path:
    """A .mov holding ``packets`` (the stream parameters and timing of ``template``),
    its index up front (a truncated copy keeps its first frames readable)."""
    with av.open(str(template)) as tpl, av.open(str(path), "w", options={"movflags": "+faststart"}) as out:
        src = tpl.streams.video[0]
        stream = out.add_stream_from_template(src)
        first = [p for p in tpl.demux(src) if p.size][:2]
        step = first[1].pts - first[0].pts
        for i, data in enumerate(packets):
            p = av.Packet(data)
            p.stream = stream
            p.pts = p.dts = i * step
            p.duration = step
            p.time_base = first[0].time_base
            out.mux(p)
    return path


DAMAGED_AT = {1: "ac", 5: "sizes", 6: "code", 11: "chroma"}


@pytest.fixture(scope="module")
def mixed(tmp_path_factory) -> dict:
    """14 frames of 72x40 HQ: clean frames from a generated clip, and mid-stream
    the conceal-* regression packets (one damaged slice each, both decoders
    flag them) at DAMAGED_AT."""
    d = tmp_path_factory.mktemp("pipeline")
    clean = clips.generate(clips.ClipSpec("clean72", width=72, height=40, frames=10), d)
    with demux.open(clean) as src:
        good = iter(list(src.packets()))
    packets = [(REGRESSIONS / f"conceal-{DAMAGED_AT[i]}-hq422-72x40.bin").read_bytes() if i in DAMAGED_AT
               else next(good) for i in range(14)]
    return {"path": _mux(d / "mixed.mov", packets, clean), "packets": packets, "clean": clean}


def result_json(result) -> dict:
    from pyprores.check.compare import summarize
    from pyprores.check.report import summary_json
    return summary_json(summarize([result]))


def threads() -> int:
    return len(os.listdir("/proc/self/task"))


@needs_vk
def test_damaged_frames_mid_stream_are_reported_on_their_frame(mixed):
    with native.Session("vulkan") as s:
        streamed = compare_file(mixed["path"], s, in_flight=4)
        serial = compare_file(mixed["path"], s, in_flight=1)
    assert result_json(streamed) == result_json(serial)
    assert not streamed.validation_messages     # under ./scripts/test: the validation layer's
    assert [c.frame for c in streamed.concealed] == sorted(DAMAGED_AT)
    with native.Session("vulkan") as alone:
        for c in streamed.concealed:
            own = alone.decode(mixed["packets"][c.frame], "apch")
            assert c.candidate_flagged and c.candidate_slices == [list(x) for x in own.concealed]
            assert c.candidate_slices and c.excluded_slices == c.candidate_slices
    assert streamed.bitexact and streamed.passed(0)


class Unflagged:
    """The mixed clip's pairs with every reference frame unflagged: the stream
    then gets the damaged packets too, and must hand each one to a decode of
    its own for its report."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __iter__(self):
        with demux.open(self.path) as src:
            for p, ref in src.pairs():
                ref.corrupt = False
                yield p, ref


@needs_vk
@pytest.mark.parametrize("in_flight", [2, 4, 8])
def test_frames_the_stream_flags_are_decoded_again_alone(mixed, monkeypatch, in_flight):
    monkeypatch.setattr(pipeline, "STICKY_INTERRUPTIONS", 1000)   # stream every frame
    with native.Session("vulkan") as s, native.Session("vulkan") as alone:
        cf = CandidateFrames(s, Unflagged(mixed["path"]), "apch", max_in_flight=in_flight)
        items = list(cf)
        assert [i.index for i in items] == list(range(14))
        assert cf.stats["redecoded"] == len(DAMAGED_AT) and cf.stats["streamed"] == 14 - len(DAMAGED_AT)
        for item in items:
            own = alone.decode(item.packet, "apch")
            assert item.candidate.corrupt == own.corrupt == (item.index in DAMAGED_AT), item.index
            assert item.candidate.concealed == own.concealed, item.index
            assert item.streamed == (item.index not in DAMAGED_AT)
            for k in own.planes:
                assert np.array_equal(item.candidate.planes[k], own.planes[k]), (item.index, k)


@needs_vk
@pytest.mark.parametrize("in_flight", [2, 3, 8])
def test_streamed_frames_are_in_order(tmp_path, in_flight):
    """Every frame differs (moving content and noise): a frame given to the
    wrong packet would deviate from its reference."""
    spec = clips.ClipSpec("order", width=96, height=48, frames=12, interlaced=True)
    path = clips.generate(spec, tmp_path)
    with native.Session("vulkan") as s, demux.open(path) as src:
        cf = CandidateFrames(s, src.pairs(), src.info.codec_tag, max_in_flight=in_flight)
        for n, item in enumerate(cf):
            assert item.index == n and item.streamed
            for k, plane in item.reference.planes.items():
                assert np.array_equal(item.candidate.planes[k], plane), (n, k)
        cf.close()


@needs_vk
def test_size_change_mid_stream():
    with native.Session("vulkan") as s:
        with demux.open(SIZE_CHANGE) as src:
            cf = CandidateFrames(s, src.pairs(), src.info.codec_tag)
            items = list(cf)
        assert cf.stats["streamed"] == len(items) >= 2
        assert len({i.candidate.planes["Y"].shape for i in items}) == 2
        for item in items:
            for k, plane in item.reference.planes.items():
                assert np.array_equal(item.candidate.planes[k], plane)
        assert result_json(compare_file(SIZE_CHANGE, s)) == result_json(compare_file(SIZE_CHANGE, s, in_flight=1))


@needs_vk
def test_early_exit_ends_the_decoder_a_finished_file_keeps_it(mixed, tmp_path):
    """A file left with frames in flight (an exception in the loop, here a
    KeyboardInterrupt) drops them and ends the decoder's threads; a file read
    to its end leaves the streaming decoder in the session for the next file
    of the same format. A truncated file fails alike either way."""
    clean = mixed["clean"]                      # 10 frames, 72x40 HQ
    with native.Session("vulkan") as s:
        compare_file(clean, s, frames=2, in_flight=1)   # the one-packet decoder: the baseline
        base = threads()
        assert compare_file(clean, s, frames=3, in_flight=8).frames == 3
        kept = threads()
        assert kept > base                      # 8 frame threads, idle
        assert compare_file(clean, s, in_flight=8).frames == 10 and threads() == kept

        def stop(n: int, ref, cand) -> None:
            if n == 1:
                raise KeyboardInterrupt
        with pytest.raises(KeyboardInterrupt):
            compare_file(clean, s, on_frame=stop, in_flight=8)
        assert threads() <= base
        cut = tmp_path / "cut.mov"
        data = mixed["path"].read_bytes()
        cut.write_bytes(data[: len(data) * 3 // 4])
        errors = []
        for in_flight in (1, 4):
            with pytest.raises(DecodeError) as e:
                compare_file(cut, s, in_flight=in_flight)
            errors.append(str(e.value))
        assert errors[0] == errors[1] and "ends early" in errors[0]


def test_a_one_frame_file_goes_one_frame_per_call():
    packets = [packet(0)]
    got, cf, s, _ = through_pipeline(packets, limit=1)
    assert got == one_frame_path(packets) and s.configured == 0
    cf = CandidateFrames(FakeSession(), iter(Reader([packet(i) for i in range(3)])), "apch", frames=1)
    assert not cf.streaming


@needs_vk
def test_cli_report_is_the_same_with_frames_in_flight(mixed, tmp_path, capsys):
    """pyprores compare --json and its table, with frames in flight (the
    default) and one frame per call, byte for byte."""
    outs = []
    for extra in ([], ["--in-flight", "1"], ["--in-flight", "3"]):
        out = tmp_path / f"r{len(outs)}.json"
        code = main(["compare", str(mixed["path"]), str(SIZE_CHANGE), "--json", str(out), *extra])
        text = capsys.readouterr()
        outs.append((code, out.read_text(), text.out, text.err))
    assert outs[0][0] == 0 and outs[0] == outs[1] == outs[2]
    doc = json.loads(outs[0][1])
    assert [c["frame"] for c in doc["files"][0]["concealed"]] == sorted(DAMAGED_AT)


def test_in_flight_limits(capsys):
    for bad in (0, 65):
        with pytest.raises(ValueError, match="max_in_flight must be 1 to 64"):
            CandidateFrames(FakeSession(), [], "apch", max_in_flight=bad)
        assert main(["compare", "--in-flight", str(bad)]) == 2
        assert "--in-flight" in capsys.readouterr().err


@needs_vk
def test_stream_config_again_keeps_the_decoder(mixed):
    """ppr_stream_config with the settings in use is a no-op once streaming (the
    decoder a finished file left is kept); other settings need a reset first."""
    with native.Session("vulkan") as s:
        s.stream_config(3)
        assert s.send_packet(mixed["packets"][0], "apch", 7)
        s.stream_config(3)
        with pytest.raises(ValueError, match="other settings"):
            s.stream_config(2)
        assert s.send_packet(None)
        got = s.receive_frame()
        assert got.pts == 7 and not got.frame.corrupt and s.receive_frame() is None
        s.stream_reset()
        s.stream_config(2)
