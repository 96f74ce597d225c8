"""The candidate side of the compare pipeline: a file's frames decoded with
several in flight, each one tied to its own packet.

:func:`pyprores.check.compare.compare_file` needs, for every (packet, reference
frame) pair of a file and in order, the candidate's frame header and decoded
frame, or the candidate's error. One frame per call (``Session.decode``,
waiting for each) leaves the GPU idle while the caller decodes the reference
and measures; :class:`CandidateFrames` keeps up to ``max_in_flight`` frames
decoding on a session that streams (``native.Session``: ``send_packet`` /
``receive_frame``, Vulkan frame threads) while the caller works on earlier
ones. What it hands out is what the one-frame path gives, item for item:

- **Frames go to their own packet.** Each packet is sent with its position
  in the file as pts, and a received frame is given to the item of that pts
  only. Items the decoder skipped (a later item's frame came first, or the
  end of the stream did), a frame of an unknown pts, a frame whose format or
  size is not the header's: those items are decoded one frame per call.
- **Damaged frames are decoded one frame per call.** Which slices the Vulkan
  hwaccel concealed comes from its log lines ("concealed slice N of picture
  P", 7.1.5 series patch 19, 9.0.2 patch 12), which frame threads
  interleave: with frames in
  flight they cannot be matched to a frame, while the frame's damage flag
  (``decode_error_flags``) is its own. So a packet whose reference frame is
  flagged is not streamed at all, and a streamed frame the candidate flags is
  decoded again, alone, for its report: every concealment reported comes from
  a decode of that packet alone.
- **Errors are the one-frame path's.** Any streaming error drops the frames in
  flight (``stream_reset``) and sends the items concerned to the one-frame
  path, which raises what it raises (or decodes them). An error reading the
  file (``pairs``) is raised after the items before it, as a serial loop
  would; nothing is read past ``limit`` items or past an item the candidate
  failed on.
- **One decoder.** The one-frame path reopens the session's decoder in its
  one-packet mode, so the frames in flight are received first (the stream is
  drained); the next streamed packet reopens the streaming decoder. A file
  with many damaged frames is decoded one frame per call from then on (see
  :data:`STICKY_INTERRUPTIONS`), so it is not slower than before. A file
  read to its end leaves the streaming decoder open in the session (no frame
  left in it), so that the next file of the same size and format does not
  open another; a file left early drops its frames in flight and closes it.
  Each iteration numbers its packets from a pts base of its own, so a frame
  of another file can never match.

Sessions that cannot stream (the software backend, ``PyAVSession``, test
doubles with only ``decode``), ``max_in_flight`` 1, and files of one frame
get the one-frame path for every item, in the order a serial loop uses
(read, inspect, decode).
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from ..errors import PyproresError
from ..model import Frame, FrameInfo

__all__ = ["DEFAULT_IN_FLIGHT", "MAX_IN_FLIGHT", "CandidateFrames", "Item", "can_stream"]

#: frames decoding at once on the candidate's device unless told (as pyprores.open_decoder)
DEFAULT_IN_FLIGHT = 4
#: the most (ppr_stream_config's limit on frame threads)
MAX_IN_FLIGHT = 64
#: a file goes one frame per call for good after this many interruptions of the stream
#: (one-frame decodes while streaming) when they are also more than 1 in RATIO of its frames
STICKY_INTERRUPTIONS = 2
STICKY_RATIO = 8
#: streaming is given up for the file after this many steps without any item moving on
#: (a decoder that neither takes packets nor gives frames); its items go one frame per call
STALL_STEPS = 16

_SERIAL, _STREAM = "serial", "stream"
# each CandidateFrames numbers its packets from its own base, so that a frame of
# another file (left in a session's decoder) can never be taken for one of this file
_PTS_BASES = itertools.count(1)


@dataclass(eq=False)
class Item:
    """One frame of the file: its packet, the reference frame, and the
    candidate's header and frame, or the candidate's error on it."""

    index: int
    packet: bytes
    reference: Frame
    header: FrameInfo | None = None
    candidate: Frame | None = None
    #: the candidate's header parser or decoder failed on this frame (the one-frame path's error)
    error: PyproresError | None = None
    #: the candidate frame came from the stream (False: decoded one frame per call)
    streamed: bool = False
    route: str = field(default=_SERIAL, repr=False)
    #: anything else the header parser raised: raised when the item's turn comes
    fault: BaseException | None = field(default=None, repr=False)

    @property
    def done(self) -> bool:
        return self.candidate is not None or self.error is not None or self.fault is not None


def can_stream(session: Any) -> bool:
    """True when ``session`` decodes on the Vulkan hwaccel and has the
    streaming calls (``native.Session``)."""
    return getattr(session, "backend", None) == "vulkan" and all(
        callable(getattr(session, m, None))
        for m in ("stream_config", "send_packet", "receive_frame", "stream_reset"))


def _fits(header: FrameInfo | None, frame: Frame) -> bool:
    """The frame is what the packet's header announces (else the one-frame
    path decides, as it checks the same)."""
    y = frame.planes.get("Y")
    return (header is not None and y is not None and frame.pix_fmt == header.pix_fmt
            and frame.bit_depth == header.bit_depth and y.shape == (header.height, header.width))


class CandidateFrames:
    """Iterate :class:`Item` for each (packet, reference frame) of ``pairs``,
    in order, with the candidate ``session``'s header and frame (see the
    module's docstring). Use once; :meth:`close` (or leaving a ``with``
    block, or the end of the iteration) drops the frames in flight.

    ``limit``: read at most this many pairs. ``max_in_flight``: frames
    decoding at once (1: one frame per call). ``frames``: how many the file
    has, when known (a file of one frame goes one frame per call). ``stats`` counts the items
    ``streamed``, those decoded ``serial`` (one frame per call), of which
    ``redecoded`` were streamed first, and the ``stream_failures``.
    """

    def __init__(self, session: Any, pairs: Iterable[tuple[bytes, Frame]], codec_tag: str, *,
                 limit: int | None = None, max_in_flight: int = DEFAULT_IN_FLIGHT,
                 frames: int | None = None) -> None:
        if not 1 <= int(max_in_flight) <= MAX_IN_FLIGHT:
            raise ValueError(f"max_in_flight must be 1 to {MAX_IN_FLIGHT} (frame threads), not {max_in_flight}")
        self.session = session
        self.codec_tag = codec_tag
        self.max_in_flight = int(max_in_flight)
        expected = min((n for n in (limit, frames) if n is not None), default=None)
        # one frame gains nothing in flight, and its drain is dear with 3+ frame threads
        # (FFmpeg 7.1 on lavapipe: ~25 ms of CPU to drain one packet, 2 ms for two)
        self.streaming = self.max_in_flight > 1 and can_stream(session) and expected != 1
        self.stats = {"streamed": 0, "serial": 0, "redecoded": 0, "stream_failures": 0}
        self._pairs: Iterator[tuple[bytes, Frame]] = iter(pairs)
        self._limit = limit
        # read ahead: the frames in flight, the one the decoder made wait, one more
        self._cap = self.max_in_flight + 2
        self._queue: deque[Item] = deque()    # read, not handed out yet
        self._sent: deque[Item] = deque()     # in the decoder, in sending order
        self._unsent: Item | None = None      # the decoder asked for a receive before taking it
        self._ended = False                   # end of stream sent; frames may still come
        self._open = False                    # the session's decoder is the streaming one
        self._configured = False
        self._read = 0
        self._exhausted = limit is not None and limit <= 0
        self._read_error: BaseException | None = None
        self._interruptions = 0
        self._events = 0                      # items that moved on (the stall guard's clock)
        self._started = False
        self._closed = False
        self._pts0 = next(_PTS_BASES) << 32

    # -- iteration -------------------------------------------------------------

    def __iter__(self) -> Iterator[Item]:
        if self._started:
            raise ValueError("CandidateFrames can be iterated once")
        self._started = True
        return self._items()

    def _items(self) -> Iterator[Item]:
        try:
            stalled = 0
            while True:
                queue = self._queue
                if queue and queue[0].done:
                    item = queue.popleft()
                    if item.fault is not None:
                        raise item.fault
                    self.stats["streamed" if item.streamed else "serial"] += 1
                    yield item
                elif queue and queue[0].route == _SERIAL:
                    self._decode_alone(queue[0])
                elif not queue:
                    if self._exhausted:
                        break
                    self._read_one()
                else:
                    before = self._events
                    self._advance()
                    stalled = stalled + 1 if self._events == before else 0
                    if stalled > STALL_STEPS:   # pragma: no cover - a decoder out of step
                        self._fail_stream()
                        self.streaming = False
                        stalled = 0
            if self._read_error is not None:
                error, self._read_error = self._read_error, None
                raise error
        finally:
            self.close()

    def _advance(self) -> None:
        """The head item waits for its streamed frame: send, read or receive."""
        if self._unsent is not None:
            if not self._send(self._unsent):
                self._receive_one()
        elif self._can_read():
            self._read_one()
        else:
            self._receive_one()

    def _can_read(self) -> bool:
        """More may be read: not at the end or the cap, and no item waits for
        the one-frame path (the stream drains before it instead)."""
        return (not self._exhausted and len(self._queue) < self._cap
                and not any(i.route == _SERIAL and not i.done for i in self._queue))

    def _read_one(self) -> None:
        try:
            packet, reference = next(self._pairs)
        except StopIteration:
            self._exhausted = True
            return
        except Exception as e:      # raised after the items before it, as a serial loop would
            self._read_error = e
            self._exhausted = True
            return
        item = Item(self._read, packet, reference)
        self._read += 1
        self._events += 1
        if self._limit is not None and self._read >= self._limit:
            self._exhausted = True
        self._queue.append(item)
        try:
            item.header = self.session.inspect(packet, self.codec_tag)
        except PyproresError as e:
            item.error = e
            self._exhausted = True  # the file stops at this frame: read no further
            return
        except Exception as e:      # raised at its turn, as a serial loop would
            item.fault = e
            self._exhausted = True
            return
        if self.streaming and not reference.corrupt:
            item.route = _STREAM
            self._send(item)

    # -- the stream ------------------------------------------------------------

    def _send(self, item: Item) -> bool:
        """Send ``item``'s packet; False when the decoder wants a receive first.
        A failure sends the items in flight, and this one, to the one-frame path."""
        try:
            if not self._configured:
                try:    # keeps the decoder a previous file left, when its settings are these
                    self.session.stream_config(self.max_in_flight, err_detect=True)
                except ValueError:
                    self.session.stream_reset()
                    self.session.stream_config(self.max_in_flight, err_detect=True)
                self._configured = True
            ok = self.session.send_packet(item.packet, self.codec_tag, self._pts0 + item.index)
        except Exception:
            self._fail_stream()
            self._reroute(item)
            if not self._configured:
                self.streaming = False
            return True
        if not ok:
            self._unsent = item
            return False
        if self._unsent is item:
            self._unsent = None
        self._sent.append(item)
        self._open = True
        self._events += 1
        return True

    def _receive_one(self) -> None:
        """Receive the next frame and give it to its item; with none to come
        before more input, end the stream so that the frames in flight come
        out; after the end, the items with no frame go to the one-frame path."""
        try:
            got = self.session.receive_frame()
        except Exception:
            self._fail_stream()
            return
        if got is not None:
            self._match(got)
            return
        if not self._ended:
            self._end_stream()
            return
        self._ended = False         # every frame is out
        while self._sent:
            self._reroute(self._sent.popleft())

    def _match(self, got: Any) -> None:
        pts = None if got.pts is None else got.pts - self._pts0
        if pts is None or not any(i.index == pts for i in self._sent):
            self._fail_stream()     # a frame of no packet in flight: trust none of them
            return
        while self._sent[0].index != pts:   # the decoder gave these no frame
            self._reroute(self._sent.popleft())
        item = self._sent.popleft()
        frame = got.frame
        if frame.corrupt or not _fits(item.header, frame):
            self.stats["redecoded"] += 1
            self._reroute(item)     # its report (or its error) comes from a decode alone
            return
        item.candidate = frame
        item.streamed = True
        self._events += 1

    def _end_stream(self) -> None:
        try:
            self.session.send_packet(None)
        except Exception:
            self._fail_stream()
            return
        self._ended = True

    def _finish_stream(self) -> None:
        """Every frame was received after the end of the stream: take the
        decoder's end of stream too, which leaves it ready for another file."""
        try:
            if self.session.receive_frame() is None:
                self._ended = False
        except Exception:
            pass                    # not clean: close() resets it

    def _drain(self) -> None:
        """Receive every frame in flight (the one-frame path needs the decoder)."""
        while self._sent:
            self._receive_one()

    def _fail_stream(self) -> None:
        """Drop the frames in flight; their items go to the one-frame path."""
        self.stats["stream_failures"] += 1
        try:
            self.session.stream_reset()
        finally:
            self._open = False
            self._ended = False
            pending = list(self._sent) + ([self._unsent] if self._unsent is not None else [])
            self._sent.clear()
            self._unsent = None
            for item in pending:
                self._reroute(item)

    def _reroute(self, item: Item) -> None:
        item.route = _SERIAL
        self._events += 1

    # -- one frame per call --------------------------------------------------

    def _decode_alone(self, item: Item) -> None:
        if self._sent:
            self._drain()
        if self._open:              # the one-frame decode closes the streaming decoder
            self._open = False
            self._ended = False
            self._interruptions += 1
            if (self._interruptions >= STICKY_INTERRUPTIONS
                    and self._interruptions * STICKY_RATIO > self._read):
                self.streaming = False
        try:
            item.candidate = self.session.decode(item.packet, self.codec_tag)
        except PyproresError as e:
            item.error = e
        self._events += 1

    # -- lifetime --------------------------------------------------------------

    def close(self) -> None:
        """Stop reading, and drop the frames in flight: with some left (an
        early exit), the streaming decoder is closed (its threads end); after
        the end of the file it stays open in the session, so that the next
        file of the same size and format needs no new decoder. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._ended and not self._sent and self._unsent is None:
                self._finish_stream()
            if self._sent or self._unsent is not None or self._ended:
                self.session.stream_reset()
        finally:
            self._sent.clear()
            self._unsent = None
            close = getattr(self._pairs, "close", None)
            if close is not None:
                close()             # the demuxer's generator, before its container closes

    def __enter__(self) -> "CandidateFrames":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
