#!/bin/bash
# device call 4 of 2026-11-23 (session 3): scripts/fuzz-gpu on the 16-patch build
# (sessions now download through the staging buffer with copy threads, limit_queues=4)
exec > >(tee $OUT/run.log) 2>&1
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
mkdir -p /opt/vl /tmp/py
dpkg -x .devbuild/vl/*.deb /opt/vl
export VK_LAYER_PATH=/opt/vl/usr/share/vulkan/explicit_layer.d
for w in .whl/*.whl; do python3 -m zipfile -e $w /tmp/py; done
B=$PWD/.devbuild/ff10
export LD_LIBRARY_PATH=$B/lib:/opt/vl/usr/lib/x86_64-linux-gnu PYTHONPATH=/tmp/py:$PWD
export PYPRORES_FFMPEG_DIR=$B PYPRORES_PYTHON=python3
if ! $B/bin/ffmpeg -hide_banner -v verbose -init_hw_device vulkan=vk:0 -f lavfi -i color -t 0.04 -f null - 2>&1 | grep -q 'Device 0'; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
nvidia-smi --query-gpu=name,driver_version --format=csv; date -u; head -1 $B/BUILDINFO; grep -c '^  00' $B/BUILDINFO
python3 -c "import pyprores._native, av; print('imports ok')" || exit 1
python3 - <<'PY'
import time, pyprores.native as n
t = time.perf_counter(); s = n.Session("vulkan", device="0"); print("session open: %.3f s" % (time.perf_counter() - t)); print(s.device_name)
PY
time scripts/fuzz-gpu --jobs 5 --time 150 --seed-base 50 /tmp/fg; echo "fuzz-gpu rc=$?"
cp /tmp/fg/summary.md $OUT/fuzz-gpu-summary.md
cd /tmp/fg && tar czf $OUT/fuzz-gpu.tar.gz fuzz-s*.json fuzz-s*.md fuzz-s*.log
exit 0
