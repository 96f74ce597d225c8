#!/bin/bash
# device call 3 of 2026-11-23 (session 3): full conformance corpus on the final 16-patch
# build (downloads now go through the staging buffer), then the 1080 benchmark clips
exec > >(tee $OUT/run.log) 2>&1
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
R=$PWD/.devbuild; F=$R/ff10; export LD_LIBRARY_PATH=$F/lib
if ! $F/bin/ffmpeg -hide_banner -v verbose -init_hw_device vulkan=vk:0 -f lavfi -i color -t 0.04 -f null - 2>&1 | grep -q 'Device 0'; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
date -u; nvidia-smi --query-gpu=name,driver_version,persistence_mode --format=csv,noheader; head -1 $F/BUILDINFO
timeout 360 scripts/conformance-gpu --ffmpeg $F --jobs 8 --out $OUT/conformance-gpu.md --workdir /tmp/cg 2>&1 | tail -4
date -u
B="python3 scripts/bench --ffmpeg $F --decbench $R/decbench --workdir /tmp/bw"
echo "== 1080"; timeout 200 $B --clips 1080p-4444-alpha,1080i-422hq-tff,1080p-422hq --modes sw-all,vk,vk-dl,api --json $OUT/bench-1080.json 2>&1 | tail -10; date -u
