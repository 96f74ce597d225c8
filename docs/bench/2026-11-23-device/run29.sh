#!/bin/bash
# device call 3 of 2026-11-23 (session 4): the 17-patch build (ff12): full corpus, scripts/fuzz-gpu
# with the validation layer, and the 4K HQ figures again (call 2's host was slower throughout)
exec > >(tee $OUT/run.log) 2>&1
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
mkdir -p /opt/vl /tmp/py
dpkg -x .devbuild/vl/*.deb /opt/vl
for w in .whl/*.whl; do python3 -m zipfile -e $w /tmp/py; done
R=$PWD/.devbuild; A=$R/ff10; B=$R/ff12
export LD_LIBRARY_PATH=$B/lib:/opt/vl/usr/lib/x86_64-linux-gnu PYTHONPATH=/tmp/py:$PWD
export PYPRORES_FFMPEG_DIR=$B PYPRORES_PYTHON=python3
if ! $B/bin/ffmpeg -hide_banner -v verbose -init_hw_device vulkan=vk:0 -f lavfi -i color -t 0.04 -f null - 2>&1 | grep -q 'Device 0'; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
date -u; nvidia-smi --query-gpu=name,driver_version,persistence_mode --format=csv,noheader; head -1 $B/BUILDINFO
echo "== full corpus, ff12"
timeout 170 scripts/conformance-gpu --ffmpeg $B --jobs 8 --out $OUT/conformance.md --workdir /tmp/cg 2>&1 | tail -2
date -u
echo "== fuzz-gpu, ff12, validation layer"
export VK_LAYER_PATH=/opt/vl/usr/share/vulkan/explicit_layer.d
time scripts/fuzz-gpu --jobs 5 --time 150 --seed-base 70 /tmp/fg; echo "fuzz-gpu rc=$?"
cp /tmp/fg/summary.md $OUT/fuzz-gpu-summary.md
unset VK_LAYER_PATH
date -u
echo "== 4K 422 HQ again"
timeout 150 python3 scripts/bench --ffmpeg $B --decbench $R/decbench --workdir /tmp/bw --clips 4k-422hq --modes sw-all,vk,vk-dl,demux,api --json $OUT/bench-4k-hq.json 2>&1 | tail -4
HW="-init_hw_device vulkan=vk:0 -hwaccel vulkan -hwaccel_output_format vulkan"
TIMEFORMAT='%R'
echo "== A/B whole process, vk, 4K HQ, alternating (wall s)"
for d in $A $B; do : > /tmp/ab-$(basename $d); done
for i in 1 2 3 4 5; do for d in $A $B; do { time LD_LIBRARY_PATH=$d/lib $d/bin/ffmpeg -nostdin -v error $HW -stream_loop 9 -i /tmp/bw/4k-422hq.mov -f null - ; } 2>> /tmp/ab-$(basename $d); done; done
for d in $A $B; do echo "$(basename $d): $(tr '\n' ' ' < /tmp/ab-$(basename $d))"; done
date -u
