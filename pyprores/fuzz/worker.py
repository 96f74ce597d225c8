"""The child side of ``pyprores fuzz``: a process that decodes packets on one backend.

The fuzzer (:mod:`pyprores.fuzz`) starts one worker per backend with the
``spawn`` start method and talks to it over a pipe. A worker serves requests
until it is told to exit, crashes (the parent sees the pipe close and the
exit signal) or stops answering (the parent kills it after the per-mutant time
limit). Its stderr goes to a log file that the parent scans for sanitizer
reports.

Vulkan sessions are kept, one per stream key (codec tag, width, height, pixel
format), and never closed: with the Khronos validation layer of Debian 12
(1.3.239), freeing a frame of hwcontext_vulkan's pool stalls 10 s per frame
(``UNASSIGNED-VkSemaphore-state-timeout``, see tests/conftest.py), so closing a
session or reopening its decoder for another frame size costs 90-150 s. A
worker that has opened too many sessions asks to be recycled; the parent
then lets it leave with ``os._exit`` (nothing freed, no stall).
"""

from __future__ import annotations

import os
import signal
import time
import traceback
from typing import Any

#: a worker asks to be recycled after this many extra Vulkan sessions, or this
#: many pixels over all of its sessions (frames of mutated sizes stay allocated)
MAX_SESSIONS = 24
MAX_SESSION_PIXELS = 64 * 1024 * 1024


def memory_kib() -> dict[str, int]:
    """VmRSS, VmHWM (peak RSS), VmSize and VmPeak of this process in KiB."""
    out: dict[str, int] = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                name = line.split(":")[0]
                if name in ("VmRSS", "VmHWM", "VmSize", "VmPeak"):
                    out[name] = int(line.split()[1])
    except OSError:
        pass
    return out


def libavcodec_path() -> str:
    """The libavcodec this process loaded (which FFmpeg build is under test)."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                if "libavcodec" in line:
                    return os.path.realpath(line.split()[-1])
    except OSError:
        pass
    return "?"


def rss_kib() -> int:
    """Resident set size of this process in KiB."""
    return memory_kib().get("VmRSS", 0)


class Decoder:
    """The sessions of one worker and the decode requests they serve."""

    def __init__(self, backend: str, device: str | None) -> None:
        from ..decode import native
        self.native = native
        self.backend = backend
        self.device = device
        self.sessions: dict[Any, Any] = {}
        self.pixels = 0
        self.validation_seen: dict[Any, int] = {}

    # -- sessions ---------------------------------------------------------------
    def key(self, packet: bytes, tag: str) -> Any:
        """The decoder configuration a packet needs: a session per key never
        reopens its decoder (None: the frame header is refused before any
        decoder is opened, so any session will do)."""
        if self.backend == "software":
            return "software"
        n = self.native
        info = n.ffi.new("ppr_frame_info *")
        data, size = n._buffer(packet)
        if n.lib.ppr_inspect_header(data, size, n.codec_tag_int(tag), info) < 0:
            return None
        return (n.codec_tag_int(tag), info.width, info.height, n.ffi.string(info.pix_fmt))

    def session(self, key: Any) -> Any:
        if key is None and self.sessions:
            return next(iter(self.sessions.values()))
        if key not in self.sessions:
            threads = 1 if self.backend == "software" else 0
            self.sessions[key] = self.native.Session(self.backend, self.device, threads)
            if isinstance(key, tuple):
                self.pixels += key[1] * key[2]
        return self.sessions[key]

    def validation_new(self) -> list[str]:
        """Validation messages logged since the last call, over all sessions
        (texts of the first 1000 per session; a placeholder for later ones)."""
        new: list[str] = []
        for key, s in self.sessions.items():
            count = s.validation_count
            seen = self.validation_seen.get(key, 0)
            if count > seen:
                texts = s.validation_messages[seen:count]
                new += texts + ["(message text not kept)"] * (count - seen - len(texts))
                self.validation_seen[key] = count
        return new

    def wants_recycle(self) -> bool:
        return len(self.sessions) > MAX_SESSIONS or self.pixels > MAX_SESSION_PIXELS

    # -- requests -----------------------------------------------------------------
    def decode(self, req: dict) -> dict:
        packet, tag = req["data"], req["tag"]
        sl = req.get("slice")
        base = sl["packet"] if sl else packet
        s = self.session(self.key(base, tag))
        t0 = time.monotonic()
        try:
            if sl:
                frame = self._decode_slices(s, sl, tag)
            else:
                frame = s.decode(packet, tag)
        except Exception as e:   # every failure is an outcome to record, not a worker error
            return {"status": "error", "error": type(e).__name__, "message": str(e)[:300],
                    "seconds": time.monotonic() - t0}
        out = {"status": "corrupt" if frame.corrupt else "ok", "seconds": time.monotonic() - t0,
               "concealed": [list(c) for c in frame.concealed or ()]}
        if req.get("planes"):
            out["planes"] = frame.planes
        return out

    @staticmethod
    def _decode_slices(s: Any, sl: dict, tag: str) -> Any:
        """Rebuild the original packet with one slice replaced, through the
        slice-submission API, and decode it."""
        original = sl["packet"]
        info = s.begin_frame(original, tag)
        for p, pic in enumerate(info.pictures):
            for x in pic.slices:
                data = original[x.offset:x.offset + x.size]
                if (p, x.index) == (sl["picture"], sl["index"]):
                    data = sl["bytes"]
                s.submit_slice(p, x.index, data)
        return s.end_frame()


def rss_run(dec: Decoder, req: dict) -> dict:
    """Decode one packet ``n`` times; RSS after every ``every`` decodes."""
    s = dec.session(dec.key(req["data"], req["tag"]))
    samples, errors = [], 0
    for i in range(req["n"]):
        try:
            s.decode(req["data"], req["tag"])
        except Exception:
            errors += 1
        if (i + 1) % req["every"] == 0:
            samples.append(rss_kib())
    return {"status": "ok", "samples": samples, "errors": errors}


def sequence(dec: Decoder, req: dict) -> dict:
    """Decode ``packets`` ([(data, tag), ...]) in order, ``repeat`` times, back
    to back in one session (no pause between decodes: races need the pace)."""
    s = dec.session(dec.key(*req["packets"][0]))
    statuses = []
    for _ in range(req.get("repeat", 1)):
        for data, tag in req["packets"]:
            try:
                statuses.append("corrupt" if s.decode(data, tag).corrupt else "ok")
            except Exception as e:
                statuses.append(f"error: {type(e).__name__}: {str(e)[:200]}")
    return {"status": "ok", "statuses": statuses}


def serve(conn: Any, backend: str, device: str | None, log_path: str, env: dict[str, str]) -> None:
    """Entry point of a worker process (multiprocessing target)."""
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 2)
    os.close(fd)
    os.environ.update(env)
    signal.signal(signal.SIGINT, signal.SIG_IGN)     # the parent handles ^C
    try:
        dec = Decoder(backend, device)
        if backend == "vulkan":
            dec.session(("warm-up", 0, 0, b""))     # fail early when there is no device
        conn.send({"status": "ready", "pid": os.getpid(), "rss_kib": rss_kib(), "libavcodec": libavcodec_path(),
                   "validation": dec.sessions and next(iter(dec.sessions.values())).validation_enabled,
                   "note": dec.sessions and getattr(next(iter(dec.sessions.values())), "note", "")})
    except Exception as e:
        conn.send({"status": "failed", "error": type(e).__name__, "message": str(e)})
        os._exit(3)
    while True:
        try:
            req = conn.recv()
        except EOFError:
            os._exit(0)
        op = req.get("op")
        if op == "exit":
            os._exit(0)            # never close the sessions: see the module docstring
        try:
            if op == "decode":
                out = dec.decode(req)
            elif op == "memory":
                out = {"status": "ok", "memory": memory_kib()}
            elif op == "rss-run":
                out = rss_run(dec, req)
            elif op == "sequence":
                out = sequence(dec, req)
            elif op == "selftest-crash":
                os.kill(os.getpid(), signal.SIGSEGV)
                out = {"status": "ok"}
            elif op == "selftest-stderr":      # what a sanitizer report looks like to the parent
                os.write(2, b"==1==ERROR: AddressSanitizer: selftest (not a real report)\n")
                out = {"status": "ok"}
            elif op == "selftest-hang":
                time.sleep(3600)
                out = {"status": "ok"}
            else:
                out = {"status": "worker-error", "message": f"unknown request {op!r}"}
        except Exception:
            out = {"status": "worker-error", "message": traceback.format_exc()[-2000:]}
        out.setdefault("memory", memory_kib())
        out["rss_kib"] = out["memory"].get("VmRSS", 0)
        out["validation"] = dec.validation_new()
        out["recycle"] = dec.wants_recycle()
        conn.send(out)
