#!/bin/bash
# device call 8 of 2026-11-23 (session 3): api-dl again with decbench reusing its
# destination frame (as hwdownload's pool does), 16-patch build
exec > >(tee $OUT/run.log) 2>&1
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
R=$PWD/.devbuild; F=$R/ff10; export LD_LIBRARY_PATH=$F/lib
if ! $F/bin/ffmpeg -hide_banner -v verbose -init_hw_device vulkan=vk:0 -f lavfi -i color -t 0.04 -f null - 2>&1 | grep -q 'Device 0'; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
date -u; head -1 $F/BUILDINFO
timeout 400 python3 scripts/bench --ffmpeg $F --decbench $R/decbench --workdir /tmp/bw --clips 4k-422hq,4k-4444xq,1080p-4444-alpha,1080p-422hq --modes api,api-dl --json $OUT/bench-api-dl.json 2>&1 | tail -7
date -u
