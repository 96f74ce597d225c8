"""Many files at once: ``compare`` spread over worker processes with Dask.

``pyprores compare --jobs N`` starts a :class:`distributed.LocalCluster` of N
worker processes (one thread each); ``--scheduler ADDRESS`` uses an existing
Dask cluster instead.  Each worker thread keeps one candidate session (one
Vulkan device) for all the files it is given; the files' results come back
as they finish and are put in input order, so the report is the one a serial
run writes.

Which Vulkan device a worker uses, first match wins:

1. ``--device`` (repeatable): worker ``k`` takes the ``k % n``-th one, ``k``
   being the worker's name when it is a number (LocalCluster names its
   workers 0, 1, ...; ``dask worker --name 3``), else a hash of it;
2. ``PYPRORES_DEVICE`` in the worker's environment (a cluster started with
   one worker per GPU, each with its device index);
3. with ``--jobs``: every Vulkan device of this machine (GPUs only when
   there are any besides a CPU implementation such as lavapipe), round-robin
   over the workers as in 1;
4. FFmpeg's choice.

A file's failure is reported for that file (the others go on).  A worker
that dies is replaced and its file given to another one (Dask's
``distributed.scheduler.allowed-failures``, 3 by default); a file that kills
workers beyond that is reported as an error.

``--results DIR`` keeps each finished file's result (a pickle named by a
hash of the path, the file's size and mtime and the options that change
the figures), so an interrupted run started again skips what is done.

Dask is optional: ``pip install pyprores[cluster]``.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

from .errors import DeviceError, PyproresError
from .decode.pipeline import DEFAULT_IN_FLIGHT

# Files a directory argument contributes (recursively, sorted).
VIDEO_SUFFIXES = (".mov", ".mp4", ".m4v", ".mxf", ".mkv", ".qt")
# Names of CPU Vulkan implementations, left out of "all devices" when a GPU is there.
CPU_DEVICES = ("llvmpipe", "lavapipe", "swiftshader")
MAX_PROBE = 64


class ClusterUnavailable(PyproresError):
    """Dask distributed is not installed."""


def expand_inputs(paths: Iterable[str]) -> list[str]:
    """FILE arguments with each directory replaced by the video files under
    it (``VIDEO_SUFFIXES``, recursively, sorted); other paths unchanged."""
    out: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            found = sorted(str(f) for f in Path(p).rglob("*")
                           if f.suffix.lower() in VIDEO_SUFFIXES and f.is_file())
            if not found:
                raise PyproresError(f"{p}: no video files ({', '.join(VIDEO_SUFFIXES)}) in this directory")
            out += found
        else:
            out.append(p)
    return out


def local_devices(backend: str = "vulkan") -> list[str | None]:
    """The Vulkan devices of this machine as ``--device`` indexes: every one
    FFmpeg can open, without CPU implementations when a GPU is present.
    ``[None]`` (FFmpeg's choice) for the software backend."""
    if backend != "vulkan":
        return [None]
    from .decode.candidate import open_session
    found: list[tuple[str, str]] = []
    for i in range(MAX_PROBE):
        try:
            s = open_session(backend, str(i), threads=1)
        except DeviceError:
            break
        try:
            found.append((str(i), s.device_name))
        finally:
            s.close()
    if not found:
        return [None]
    gpus = [i for i, name in found if not any(c in name.lower() for c in CPU_DEVICES)]
    return gpus or [i for i, _ in found]


# -- on the workers ------------------------------------------------------------

_local = threading.local()


def _worker_index() -> int:
    try:
        from distributed import get_worker
        name = get_worker().name
    except (ImportError, ValueError):
        return 0
    try:
        return int(name)
    except (TypeError, ValueError):
        return zlib.crc32(str(name).encode())


def worker_device(devices: Sequence[str | None] | None, explicit: bool) -> str | None:
    """The device this worker uses (see the module's docstring)."""
    if devices and explicit:
        return devices[_worker_index() % len(devices)]
    env = os.environ.get("PYPRORES_DEVICE")
    if env:
        return env
    if devices:
        return devices[_worker_index() % len(devices)]
    return None


def worker_session(backend: str, device: str | None):
    """This worker thread's session, opened on first use and kept."""
    key = (backend, device)
    sessions = getattr(_local, "sessions", None)
    if sessions is None:
        sessions = _local.sessions = {}
    if key not in sessions:
        from .decode.candidate import open_session
        sessions[key] = open_session(backend, device)
    return sessions[key]


@dataclass
class Outcome:
    """What a worker sends back for one file: a result or an error."""

    index: int
    result: object | None = None        # compare.FileResult
    error: str | None = None
    fatal: bool = False                  # DeviceError / NativeLibraryError: serial would stop
    device: str | None = None            # the worker session's device name, backend and note
    backend: str | None = None
    note: str = ""


def _frame_events(index: int, topic: str | None):
    """A compare_file progress callback that tells the client, at most twice a
    second, how many frames of file ``index`` are done (Dask worker events)."""
    if not topic:
        return None
    try:
        from distributed import get_worker
        worker = get_worker()
    except (ImportError, ValueError):
        return None
    import time
    last = [0.0]

    def report(done: int, total: int | None) -> None:
        now = time.monotonic()
        if now - last[0] >= 0.5:
            last[0] = now
            worker.log_event(topic, [index, done])
    return report


def compare_task(index: int, path: str, backend: str, devices: Sequence[str | None] | None,
                 explicit: bool, frames: int | None, worst: int, topic: str | None = None,
                 in_flight: int = DEFAULT_IN_FLIGHT) -> Outcome:
    """Run on a worker: compare one file with this worker's session, ``in_flight``
    frames decoding at once (``topic``: where frame progress goes, see
    :class:`FilesProgress`)."""
    from .check.compare import compare_file
    from .errors import NativeLibraryError
    try:
        session = worker_session(backend, worker_device(devices, explicit))
        result = compare_file(path, session, frames, worst, _frame_events(index, topic),
                              in_flight=in_flight)
        note = getattr(session, "note", "")     # as the serial run adds it (cli.cmd_compare)
        if note:
            result.notes.append(f"Vulkan device {note}")
        return Outcome(index, result=result)
    except (DeviceError, NativeLibraryError) as e:
        return Outcome(index, error=str(e), fatal=True)
    except PyproresError as e:
        return Outcome(index, error=str(e))


def conformance_task(index: int, path: str, entry: dict, base: str, backend: str,
                     devices: Sequence[str | None] | None, explicit: bool,
                     in_flight: int = DEFAULT_IN_FLIGHT) -> Outcome:
    """Run on a worker: one clip of a conformance manifest."""
    from .corpus.conformance import check_clip
    from .errors import NativeLibraryError
    try:
        session = worker_session(backend, worker_device(devices, explicit))
        return Outcome(index, result=check_clip(entry, Path(base), session, in_flight=in_flight),
                       device=session.device_name,
                       backend=getattr(session, "backend", backend), note=getattr(session, "note", "") or "")
    except (DeviceError, NativeLibraryError) as e:
        return Outcome(index, error=str(e), fatal=True)


# -- the driver ------------------------------------------------------------------

def _dask():
    try:
        import distributed
    except ImportError as e:
        raise ClusterUnavailable(
            f"--jobs, --scheduler and --results need Dask distributed ({e}); "
            "install it with: pip install 'pyprores[cluster]'") from e
    return distributed


class ResultStore:
    """``--results DIR``: one pickle per finished file."""

    def __init__(self, directory: str | os.PathLike, options: dict) -> None:
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.options = options

    def key(self, path: str) -> str:
        try:
            st = os.stat(path)
            stamp = [st.st_size, st.st_mtime_ns]
        except OSError:
            stamp = None
        text = json.dumps([path, os.path.abspath(path), stamp, self.options], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    def load(self, path: str):
        f = self.dir / f"{self.key(path)}.pickle"
        try:
            with open(f, "rb") as fh:
                return pickle.load(fh)
        except (OSError, pickle.UnpicklingError, EOFError, AttributeError, ImportError):
            return None

    def save(self, path: str, result) -> None:
        f = self.dir / f"{self.key(path)}.pickle"
        tmp = f.with_name(f.name + f".{os.getpid()}.tmp")
        with open(tmp, "wb") as fh:
            pickle.dump(result, fh, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, f)


# A worker holds one file at a time (Dask's default, 1.1, gives a one-thread worker a second
# one in advance): when a worker dies, only the file it was checking counts the death
# (allowed-failures), not an innocent one queued behind it. For --scheduler, configure the
# cluster's scheduler the same way (DASK_DISTRIBUTED__SCHEDULER__WORKER_SATURATION=1.0).
LOCAL_SCHEDULER_CONFIG = {"distributed.scheduler.worker-saturation": 1.0}


def open_client(jobs: int | None = None, scheduler: str | None = None):
    """A Dask client: on ``scheduler``, else on a new LocalCluster of ``jobs``
    single-threaded worker processes. Close it (context manager) when done."""
    distributed = _dask()
    if scheduler:
        try:
            return distributed.Client(scheduler, timeout="30s")
        except (OSError, TimeoutError) as e:
            raise PyproresError(f"cannot reach the Dask scheduler {scheduler}: {e}") from e
    import logging
    import dask
    with dask.config.set(LOCAL_SCHEDULER_CONFIG):
        cluster = distributed.LocalCluster(n_workers=jobs or 1, threads_per_worker=1, processes=True,
                                           dashboard_address=None, silence_logs=logging.ERROR)
    client = distributed.Client(cluster)
    client._pyprores_cluster = cluster   # closed with the client (see close_client)
    return client


def close_client(client) -> None:
    cluster = getattr(client, "_pyprores_cluster", None)
    client.close()
    if cluster is not None:
        cluster.close()


def run(client, files: Sequence[str], task: Callable[..., Outcome], args: tuple,
        store: ResultStore | None = None,
        on_done: Callable[[int, Outcome], None] | None = None,
        extra: Sequence[tuple] | None = None) -> list[Outcome]:
    """Submit ``task(index, path, *extra[index], *args)`` for every file not
    already in ``store``; return one Outcome per file, in input order.
    ``on_done(done, outcome)`` is called as each file finishes (stored ones
    first)."""
    distributed = _dask()
    outcomes: list[Outcome | None] = [None] * len(files)
    done = 0
    futures = {}
    for i, path in enumerate(files):
        cached = store.load(path) if store is not None else None
        if cached is not None:
            outcomes[i] = Outcome(i, result=cached)
            done += 1
            if on_done:
                on_done(done, outcomes[i])
            continue
        fut = client.submit(task, i, path, *(extra[i] if extra else ()), *args, pure=False,
                            key=f"pyprores-{task.__name__}-{i}-{os.urandom(4).hex()}")
        futures[fut] = i
    import asyncio
    for fut in distributed.as_completed(list(futures)):
        i = futures[fut]
        # result(), not the status: a finished file whose result sat on a worker that died
        # since is computed again, and result() waits for that.
        try:
            out = fut.result()
        except distributed.KilledWorker:
            out = Outcome(i, error=f"{files[i]}: the worker checking it died (too many times: "
                                   "the file may crash the decoder)")
        except (Exception, asyncio.CancelledError) as exc:
            out = Outcome(i, error=f"{files[i]}: {type(exc).__name__}: {exc}")
        fut.release()
        outcomes[i] = out
        if store is not None and out.result is not None:
            store.save(files[i], out.result)
        done += 1
        if on_done:
            on_done(done, out)
    return outcomes  # type: ignore[return-value]


class FilesProgress:
    """The progress of a cluster run on one line: ``F frames, files [###...] d/N``,
    the files as they finish, the frames as the workers report them (at most
    twice a second each). Error lines are printed on a line of their own."""

    def __init__(self, bar, total: int) -> None:
        self.bar = bar
        self.total = total
        self.files = 0
        self.frames_finished = 0           # of finished files
        self.frames_running: dict[int, int] = {}
        self.finished: set[int] = set()
        self.lock = threading.Lock()
        self.topic = f"pyprores-frames-{os.urandom(6).hex()}"

    def _draw(self) -> None:
        if self.bar is None:
            return
        frames = self.frames_finished + sum(self.frames_running.values())
        self.bar.label = f"{frames} frames, files"
        self.bar(self.files, self.total)

    def on_event(self, event) -> None:          # Dask's event handler: (timestamp, [index, done])
        try:
            index, done = event[1]
        except (TypeError, ValueError, IndexError):
            return
        with self.lock:
            if index not in self.finished:        # a late event must not count a file twice
                self.frames_running[index] = max(done, self.frames_running.get(index, 0))
                self._draw()

    def file_done(self, done: int, out: Outcome, error: Callable[[str], None] | None) -> None:
        with self.lock:
            self.files = done
            self.frames_running.pop(out.index, None)
            self.finished.add(out.index)
            self.frames_finished += getattr(out.result, "frames", 0) or 0
            if out.error is not None and error is not None:
                if self.bar is not None:
                    self.bar.finish()
                error(out.error)
            self._draw()


def compare_files(files: Sequence[str], *, backend: str, devices: Sequence[str] | None,
                  frames: int | None, worst: int, jobs: int | None = None, scheduler: str | None = None,
                  results_dir: str | None = None, progress=None,
                  on_error: Callable[[str], None] | None = None,
                  in_flight: int = DEFAULT_IN_FLIGHT) -> tuple[list, bool]:
    """Compare ``files`` on a cluster. Returns (FileResults in input order,
    whether any file failed). ``devices``: the user's ``--device`` list, or
    None for the default (see the module's docstring). ``in_flight``: frames
    each worker's session decodes at once (the results do not depend on it,
    so ``--results`` files are shared across values)."""
    explicit = bool(devices)
    if not explicit and not scheduler:
        devices = local_devices(backend)
        if devices == [None]:
            # Nothing found: fail fast here, as the serial run does, when no device opens at all.
            from .decode.candidate import open_session
            open_session(backend, None).close()
    store = None
    if results_dir:
        store = ResultStore(results_dir, {"backend": backend, "frames": frames, "worst": worst})
    failed = False
    shown = FilesProgress(progress, len(files))

    def on_done(done: int, out: Outcome) -> None:
        nonlocal failed
        failed = failed or out.error is not None
        shown.file_done(done, out, on_error)

    client = open_client(jobs, scheduler)
    try:
        client.subscribe_topic(shown.topic, shown.on_event)
        outcomes = run(client, files, compare_task, (backend, list(devices or ()) or None, explicit,
                                                     frames, worst, shown.topic, in_flight), store, on_done)
    finally:
        close_client(client)
    return [o.result for o in outcomes if o.result is not None], failed


def conformance_clips(*, backend: str, devices: Sequence[str] | None, jobs: int | None = None,
                      scheduler: str | None = None, in_flight: int = DEFAULT_IN_FLIGHT):
    """A ``check_all`` for :func:`pyprores.corpus.conformance.run` that checks the
    clips on a cluster (the device rules of compare_files)."""
    from .corpus.conformance import ClipResult

    def check_all(entries: list, base, progress) -> tuple[list, str, str, str]:
        explicit = bool(devices)
        devs = list(devices or ()) or None
        if not explicit and not scheduler:
            devs = local_devices(backend)
            if devs == [None]:
                from .decode.candidate import open_session
                open_session(backend, None).close()
        total = sum(e["frames"] for e in entries)
        frames_done = 0

        def on_done(done: int, out: Outcome) -> None:
            nonlocal frames_done
            frames_done += entries[out.index]["frames"]
            if progress is not None:
                progress(frames_done, total)

        files = [str(Path(base) / e["file"]) for e in entries]
        client = open_client(jobs, scheduler)
        try:
            outcomes = run(client, files, conformance_task, (str(base), backend, devs, explicit, in_flight),
                           on_done=on_done, extra=[(e,) for e in entries])
        finally:
            close_client(client)
        fatal = next((o for o in outcomes if o.fatal), None)
        if fatal is not None:
            from .errors import NativeLibraryError
            raise (NativeLibraryError if "native extension" in (fatal.error or "") else DeviceError)(fatal.error)
        results = []
        for e, o in zip(entries, outcomes):
            if o.result is None:
                o.result = ClipResult(name=e["name"], description=e.get("description", ""),
                                      pix_fmt=e["pix_fmt"], expected_frames=e["frames"], error=o.error)
            results.append(o.result)
        first = next((o for o in outcomes if o.device), None)
        return (results, first.device if first else "?", first.backend if first else backend,
                first.note if first else "")
    return check_all
