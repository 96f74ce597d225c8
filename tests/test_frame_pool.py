"""The session's own frame pool (csrc/ownpool.c, PPR_STREAM_OWN_POOL,
``_frame_pool="linear"``): the decoder writes its frames into linear images in
device-local memory of the session's own pool, which ``_cuda_copy="none"``
hands to CUDA in place. Here (lavapipe, no CUDA) the frames go the usual ways
to numpy (the GPU download, hwcontext_vulkan's, the pump's host sinks and its
shader copy): sample for sample the default pool's frames, for 4:2:2, 4:4:4 +
alpha and interlaced clips; every pool image freed once decoders and frames
are gone; the validation layer silent (./scripts/test turns it on).
"""

from __future__ import annotations

import gc
from pathlib import Path

import pytest

import pyprores
from pyprores.corpus import clips
from pyprores.decode import native

from test_stream import assert_same, reference

HAS_VK = native.available() and native.has_hwaccel("vulkan")
pytestmark = pytest.mark.skipif(not HAS_VK, reason="this FFmpeg build has no prores_vulkan hwaccel")
FRAMES = 4


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("pool")
    return {s.name: clips.generate(clips.ClipSpec(**{**s.__dict__, "frames": FRAMES}), d)
            for s in clips.DEFAULT_CLIPS}


def live() -> int:
    return int(native.lib.ppr_own_images_live())


def no_validation_messages(dec) -> None:
    # the layer's messages that name our pool's calls or images (FFmpeg's own noise is
    # filtered by PYPRORES_VALIDATION_IGNORE, see conftest.py)
    msgs = dec._session.validation_messages
    assert dec._session.validation_count == 0, msgs


@pytest.mark.parametrize("how", [
    {},                                          # the GPU download into host buffers
    {"gpu_download": False},                     # hwcontext_vulkan's av_hwframe_transfer_data
    {"_pump": "host"},                           # the pump, a transfer per frame
    {"_pump": "host-shader"},                    # the pump, the compute-shader copy of CUDA frames
])
def test_frames_equal_the_default_pool(paths, how):
    assert live() == 0
    for name, path in paths.items():
        want = reference(path)
        with pyprores.open_decoder(path, max_in_flight=3, **how) as ref:
            assert ref.frame_pool == "default"
            default = list(ref)
        with pyprores.open_decoder(path, max_in_flight=3, _frame_pool="linear", **how) as dec:
            assert dec.frame_pool == "linear"
            got, seen = [], 0
            for f in dec:
                got.append(f)
                seen = max(seen, live())
            assert seen > 0, "the frames did not come from the session's own pool"
            no_validation_messages(dec)
        assert len(got) == len(default) == len(want) == FRAMES, name
        for n, (g, d, w) in enumerate(zip(got, default, want)):
            assert_same(g, d, f"{name} frame {n}, {how}")
            assert_same(g, w, f"{name} frame {n}, {how}")
    del got, default, dec, ref, f
    gc.collect()
    assert live() == 0, "the pool's images outlived their decoders and frames"


def test_pool_images_freed_after_early_exit(paths):
    path = paths[clips.DEFAULT_CLIPS[0].name]
    dec = pyprores.open_decoder(path, _frame_pool="linear", max_in_flight=3)
    first = next(iter(dec))
    assert live() > 0
    dec.close()
    del dec
    gc.collect()
    assert live() == 0   # numpy planes hold host memory, not the pool's images
    assert first.planes["Y"].size


def test_size_change_makes_a_new_pool():
    from test_stream import SIZE_CHANGE
    want = reference(SIZE_CHANGE)
    with pyprores.open_decoder(SIZE_CHANGE, _frame_pool="linear", max_in_flight=2) as dec:
        got = list(dec)
        no_validation_messages(dec)
    assert len(got) == len(want)
    for n, (g, w) in enumerate(zip(got, want)):
        assert_same(g, w, f"frame {n}")
    del dec
    gc.collect()
    assert live() == 0


def test_arguments():
    with pytest.raises(ValueError, match="_frame_pool"):
        pyprores.open_decoder("x.mov", _frame_pool="optimal")
    with pytest.raises(ValueError, match="_frame_pool"):
        pyprores.open_decoder("x.mov", backend="software", _frame_pool="linear")
    with pytest.raises(ValueError, match="_cuda_copy"):
        pyprores.open_decoder("x.mov", _cuda_copy="none")   # output="cuda" only
