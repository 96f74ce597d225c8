#!/bin/bash
# device call 7 of 2026-11-23 (session 3): the py mode again, after csrc downloads
# straight into the caller's (unpadded) planes; pyprores compare on the bench clips
exec > >(tee $OUT/run.log) 2>&1
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
mkdir -p /tmp/py; for w in .whl/*.whl; do python3 -m zipfile -e $w /tmp/py; done
R=$PWD/.devbuild; F=$R/ff10
export LD_LIBRARY_PATH=$F/lib PYTHONPATH=/tmp/py:$PWD PYPRORES_FFMPEG_DIR=$F PYPRORES_PYTHON=python3
if ! $F/bin/ffmpeg -hide_banner -v verbose -init_hw_device vulkan=vk:0 -f lavfi -i color -t 0.04 -f null - 2>&1 | grep -q 'Device 0'; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
date -u; head -1 $F/BUILDINFO
B="python3 scripts/bench --ffmpeg $F --decbench $R/decbench --workdir /tmp/bw"
timeout 360 $B --clips 4k-422hq,4k-4444xq,1080p-4444-alpha,1080p-422hq --modes py --json $OUT/bench-py.json 2>&1 | tail -7
date -u
for c in 4k-422hq 4k-4444xq 1080p-4444-alpha 1080p-422hq; do
  timeout 120 python3 -m pyprores compare --device 0 --frames 12 --no-progress --json $OUT/compare-$c.json /tmp/bw/$c.mov > $OUT/compare-$c.txt 2>&1
  echo "compare $c: rc=$?"; tail -4 $OUT/compare-$c.txt
done
date -u
