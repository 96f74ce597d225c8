"""compare on Dask (issue 23): --jobs, --scheduler, --results, directories.

A LocalCluster of two worker processes on lavapipe, a few two-frame clips:
the distributed report must be the serial one, byte for byte, a bad file is
reported while the others complete, a worker that dies has its file checked
again elsewhere, and --results resumes.
"""

from __future__ import annotations

import json
import os
import pickle
import sys
from pathlib import Path

import pytest

from pyprores.decode import candidate
from pyprores import cli, cluster
from pyprores.corpus import clips

distributed = pytest.importorskip("distributed")


def _native_or_none():
    try:
        native = candidate.load_native()
    except Exception as e:  # NativeLibraryError, or anything the import raises
        return e
    return native if native.has_hwaccel("vulkan") else RuntimeError("no ProRes Vulkan hwaccel")


_NATIVE = _native_or_none()
pytestmark = pytest.mark.skipif(isinstance(_NATIVE, Exception), reason=f"pyprores.decode.native not usable: {_NATIVE}")


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("clusterclips")
    for spec in clips.DEFAULT_CLIPS:
        clips.generate(clips.ClipSpec(**{**spec.__dict__, "frames": 2}), d)
    (d / "sub").mkdir()
    clips.generate(clips.ClipSpec(**{**clips.DEFAULT_CLIPS[0].__dict__, "name": "nested", "frames": 1}), d / "sub")
    return d


@pytest.fixture(scope="module")
def bad_file(clip_dir) -> Path:
    bad = clip_dir.parent / "truncated.mov"
    bad.write_bytes((clip_dir / "hq422.mov").read_bytes()[:5000])
    return bad


@pytest.fixture(scope="module")
def client():
    """Two single-threaded worker processes; a worker that dies is retried once
    (allowed-failures 1: the second death of a file's worker is final)."""
    import dask
    import logging
    with dask.config.set({"distributed.scheduler.allowed-failures": 1, **cluster.LOCAL_SCHEDULER_CONFIG}):
        with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                      dashboard_address=None, silence_logs=logging.ERROR) as lc:
            with distributed.Client(lc) as c:
                yield c


def run(argv, capsys):
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def files_of(clip_dir: Path) -> list[Path]:
    return [clip_dir / "4444alpha.mov", clip_dir / "hq422.mov", clip_dir / "interlaced422.mov"]


def test_directories_expand_to_their_video_files(clip_dir, tmp_path):
    assert cluster.expand_inputs([str(clip_dir)]) == [str(p) for p in files_of(clip_dir)] + \
        [str(clip_dir / "sub" / "nested.mov")]
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(cluster.PyproresError, match="no video files"):
        cluster.expand_inputs([str(tmp_path)])


def test_devices_round_robin_over_worker_names(monkeypatch):
    monkeypatch.setattr(cluster, "_worker_index", lambda: 3)
    monkeypatch.delenv("PYPRORES_DEVICE", raising=False)
    assert cluster.worker_device(["0", "1"], explicit=True) == "1"
    assert cluster.worker_device(["0", "1", "2"], explicit=False) == "0"
    monkeypatch.setenv("PYPRORES_DEVICE", "7")
    assert cluster.worker_device(["0", "1"], explicit=False) == "7"   # the worker's own wins over the probe
    assert cluster.worker_device(["0", "1"], explicit=True) == "1"    # --device wins over all
    assert cluster.worker_device(None, explicit=False) == "7"
    assert cluster.local_devices("software") == [None]
    assert cluster.local_devices("vulkan") == ["0"]                   # lavapipe only: itself


def test_jobs_report_equals_serial(clip_dir, tmp_path, capsys):
    # the serial run one frame per call, the workers with frames in flight (the default)
    code, out, err = run(["compare", clip_dir, "--in-flight", "1", "--json", tmp_path / "serial.json"], capsys)
    assert code == 0, err
    # two --device (the same lavapipe, by index and by name): the workers take one each
    pcode, pout, perr = run(["compare", clip_dir, "--jobs", "2", "--device", "0", "--device", "llvmpipe",
                             "--json", tmp_path / "jobs.json"], capsys)
    assert pcode == 0, perr
    assert (tmp_path / "serial.json").read_text() == (tmp_path / "jobs.json").read_text()
    assert out == pout and "TOTAL: 4 file(s)" in out
    jobs = json.loads((tmp_path / "jobs.json").read_text())
    assert [f["file"] for f in jobs["files"]] == [str(p) for p in files_of(clip_dir)] + \
        [str(clip_dir / "sub" / "nested.mov")]


def test_scheduler_bad_file_in_the_middle(client, clip_dir, bad_file, tmp_path, capsys):
    files = files_of(clip_dir)
    argv = ["compare", files[0], bad_file, *files[1:]]
    code, out, err = run(argv + ["--json", tmp_path / "serial.json"], capsys)
    pcode, pout, perr = run(argv + ["--scheduler", client.scheduler.address, "--in-flight", "3",
                                    "--json", tmp_path / "dask.json"], capsys)
    assert code == pcode == 2
    assert out == pout and "Traceback" not in perr
    assert (tmp_path / "serial.json").read_text() == (tmp_path / "dask.json").read_text()
    assert perr.count("pyprores: error: ") == 1 and "truncated.mov" in perr
    assert len(json.loads((tmp_path / "dask.json").read_text())["files"]) == 3


def test_results_dir_resumes(client, clip_dir, tmp_path, capsys):
    files = files_of(clip_dir)
    argv = ["compare", *files, "--scheduler", client.scheduler.address, "--results", tmp_path / "res",
            "--json", tmp_path / "a.json"]
    code, _, err = run(argv, capsys)
    assert code == 0, err
    stored = sorted((tmp_path / "res").glob("*.pickle"))
    assert len(stored) == 3
    # Mark one stored result: a second run must take it from the store, not check the file again.
    store = cluster.ResultStore(tmp_path / "res", {"backend": "vulkan", "frames": None, "worst": 5})
    result = store.load(str(files[1]))
    assert result is not None and result.path == str(files[1])
    result.notes.append("from the results directory")
    store.save(str(files[1]), result)
    argv[-1] = tmp_path / "b.json"
    code, out, err = run(argv, capsys)
    assert code == 0, err
    b = json.loads((tmp_path / "b.json").read_text())
    assert b["files"][1]["notes"] == ["from the results directory"]
    a = json.loads((tmp_path / "a.json").read_text())
    assert [f["file"] for f in a["files"]] == [f["file"] for f in b["files"]]
    assert a["files"][0] == b["files"][0] and a["files"][2] == b["files"][2]
    # Other options are other results: --frames 1 checks everything again.
    code, _, _ = run(argv[:-2] + ["--frames", "1", "--json", tmp_path / "c.json"], capsys)
    assert code == 0 and len(list((tmp_path / "res").glob("*.pickle"))) == 6


def _dies_on(index_to_kill: int, marker_dir: str, always: bool):
    """A task that kills its worker process on one file (once, or every time)."""
    def task(index, path, *args):
        marker = Path(marker_dir) / f"killed-{index}-{os.getpid()}"
        if index == index_to_kill and (always or not any(Path(marker_dir).glob(f"killed-{index}-*"))):
            marker.touch()
            os._exit(1)
        return cluster.compare_task(index, path, *args)
    task.__name__ = "dies"
    return task


def _register_by_value():
    import cloudpickle
    cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_killed_worker_file_is_retried(client, clip_dir, tmp_path):
    _register_by_value()
    files = [str(p) for p in files_of(clip_dir)]
    args = ("vulkan", None, False, None, 5)
    outcomes = cluster.run(client, files, _dies_on(1, str(tmp_path), always=False), args)
    assert len(list(tmp_path.glob("killed-1-*"))) == 1
    assert [o.error for o in outcomes] == [None] * 3
    assert [o.result.path for o in outcomes] == files
    assert all(o.result.bitexact for o in outcomes)


def test_file_that_kills_every_worker_is_reported(client, clip_dir, tmp_path):
    _register_by_value()
    files = [str(p) for p in files_of(clip_dir)]
    outcomes = cluster.run(client, files, _dies_on(2, str(tmp_path), always=True), ("vulkan", None, False, None, 5))
    assert outcomes[0].result is not None and outcomes[1].result is not None
    assert outcomes[2].result is None and "died" in outcomes[2].error and files[2] in outcomes[2].error
    client.wait_for_workers(2, timeout=60)


def test_several_devices_need_jobs(capsys, clip_dir):
    code, out, err = run(["compare", clip_dir / "hq422.mov", "--device", "0", "--device", "1"], capsys)
    assert code == 2 and "--jobs" in err and out == ""


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory, ffmpeg_dir) -> Path:
    """Five clips of the quick corpus (4:2:0 proxy to 4444 XQ with alpha, both field orders)
    plus a sixth, truncated, that both runs must report the same way."""
    from pyprores import corpus
    d = tmp_path_factory.mktemp("corpus-small")
    corpus.generate(d, "quick", ffmpeg_dir, jobs=1, recipes=corpus.quick_recipes()[::45])
    doc = json.loads((d / "manifest.json").read_text())
    bad = dict(doc["clips"][0], name="truncated", file="truncated.mov")
    (d / "truncated.mov").write_bytes((d / doc["clips"][0]["file"]).read_bytes()[:3000])
    doc["clips"].insert(2, bad)
    (d / "manifest.json").write_text(json.dumps(doc))
    return d


def test_conformance_on_the_cluster_equals_serial(client, small_corpus, capsys):
    def section(argv):
        code, out, err = run(["conformance", small_corpus, "--no-progress", *argv], capsys)
        lines = [line for line in out.splitlines()
                 if not line.startswith(("- Date: ", "- Command: "))]   # run time, options
        return code, lines, err
    code, serial, err = section([])
    pcode, dask, perr = section(["--scheduler", client.scheduler.address])
    assert code == pcode == 1, err + perr
    assert serial == dask
    rows = [r for r in dask if r.startswith("| ")][1:]   # after the header
    assert len(rows) == 6 and rows[2].startswith("| truncated |") and "**NO**" in rows[2]
    assert all("| yes | match |" in r for i, r in enumerate(rows) if i != 2)
    assert "- Result: **5/6 clips bit-exact**" in "\n".join(dask)


def test_without_dask_a_one_line_error(monkeypatch, capsys, clip_dir):
    monkeypatch.setitem(sys.modules, "distributed", None)
    code, out, err = run(["compare", clip_dir / "hq422.mov", "--jobs", "2"], capsys)
    assert code == 2 and out == ""
    assert err.startswith("pyprores: error: ") and err.count("\n") == 1 and "pyprores[cluster]" in err


def test_progress_counts_files_and_frames(client, clip_dir, capsys):
    files = files_of(clip_dir)
    code, out, err = run(["compare", *files, "--scheduler", client.scheduler.address, "--progress"], capsys)
    assert code == 0, err
    assert "6 frames, files [" in err and "] 3/3" in err        # three files of two frames
    assert "pyprores: error" not in err


def test_no_device_stops_before_any_worker_starts(monkeypatch, capsys, clip_dir):
    import types
    from pyprores.errors import DeviceError

    def no_device(*a, **k):
        raise DeviceError("no Vulkan device found; install mesa-vulkan-drivers")
    monkeypatch.setattr(candidate, "load_native", lambda: types.SimpleNamespace(Session=no_device))
    monkeypatch.setattr(cluster, "open_client", lambda *a, **k: pytest.fail("a cluster was started"))
    code, out, err = run(["compare", clip_dir, "--jobs", "2"], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1 and "no Vulkan device" in err
