"""rss_reopen: the process's RSS while pyprores.decode.native decoders are closed and
opened again, for tests/test_memory.py (and by hand, to measure a build).

    python tests/tools/rss_reopen.py MODE BACKEND WARMUP N SMALL.mov LARGE.mov

MODE
  reopen   one session decodes the first packet of SMALL and of LARGE in
           turn: every decode reopens the decoder (a size change), two per round
  stream   pyprores.open_decoder (frame threads, error detection on) over
           every frame of SMALL, N times, while another session keeps the
           Vulkan device open: every round opens, drains and closes a decoder
  prefetch pyprores.open_decoder over packets in memory, SMALL's and LARGE's
           in turn (a size change among the packets prepared ahead), twice:
           once to the end, once left after two frames with packets prepared
           and not sent (prefetch 3) and frames handed to the download
           thread and not delivered, the device kept open as for stream
  file     pyprores.open_decoder over SMALL's file (the C library's reader
           thread), left after its first frame with packets read ahead and
           frames in flight, then over LARGE's to the end, the device kept open
  session  N sessions one after the other, each decoding the first packet of
           SMALL; none is open in between, so each creates the device anew

The first WARMUP rounds are not measured (the Vulkan driver's own caches
fill then). Prints one JSON line: the build, VmRSS in KiB after the warm-up
and after each further round, and the growth over the measured rounds.
"""

from __future__ import annotations

import gc
import json
import sys


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


def first_packet(path: str) -> tuple[bytes, str]:
    import pyprores
    with pyprores.open(path) as src:
        for packet in src.packets():
            return bytes(packet), src.info.codec_tag
    raise RuntimeError(f"{path}: no packet")


def main(argv: list[str]) -> int:
    mode, backend, warmup, n, small, large = argv[1], argv[2], int(argv[3]), int(argv[4]), argv[5], argv[6]
    import pyprores
    from pyprores.decode import native

    a, tag_a = first_packet(small)
    b, tag_b = first_packet(large)
    keep = None

    if mode == "reopen":
        session = native.Session(backend)

        def one_round() -> None:
            session.decode(b, tag_b)
            session.decode(a, tag_a)
        session.decode(a, tag_a)
    elif mode == "stream":
        keep = native.Session(backend)   # the device stays: only decoders come and go

        def one_round() -> None:
            with pyprores.open_decoder(small, backend=backend, max_in_flight=2, err_detect=True) as dec:
                frames = sum(1 for _ in dec)
            assert frames > 0
    elif mode == "prefetch":
        keep = native.Session(backend)
        mixed = [(a, 0), (a, 1), (b, 2), (b, 3), (a, 4), (b, 5), (a, 6), (a, 7)]

        def one_round() -> None:
            with pyprores.open_decoder(mixed, backend=backend, codec_tag=tag_a, max_in_flight=2,
                                       prefetch=3) as dec:
                assert sum(1 for _ in dec) == len(mixed)
            with pyprores.open_decoder(mixed * 4, backend=backend, codec_tag=tag_a,
                                       max_in_flight=2, prefetch=3) as dec:
                for n, _ in enumerate(dec):
                    if n == 1:
                        break
    elif mode == "file":
        keep = native.Session(backend)

        def one_round() -> None:
            with pyprores.open_decoder(small, backend=backend, max_in_flight=2, prefetch=1) as dec:
                next(iter(dec))
            with pyprores.open_decoder(large, backend=backend, max_in_flight=2) as dec:
                assert sum(1 for _ in dec) > 0
            assert native.lib.ppr_readers_live() == 0
    elif mode == "session":
        def one_round() -> None:
            with native.Session(backend) as s:
                s.decode(a, tag_a)
    else:
        print(f"unknown mode {mode!r}", file=sys.stderr)
        return 2

    for _ in range(warmup):
        one_round()
    gc.collect()
    samples = [rss_kib()]
    for _ in range(n):
        one_round()
        gc.collect()
        samples.append(rss_kib())
    if keep is not None:
        keep.close()
    print(json.dumps({"ffmpeg": native.ffmpeg_version(), "mode": mode, "backend": backend,
                      "rounds": n, "samples_kib": samples, "growth_kib": samples[-1] - samples[0]}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
