#!/bin/bash
# device call 3 of 2026-11-23 (session 2): scripts/bench on the 13-patch series, one JSON per clip group
exec > >(tee $OUT/run.log) 2>&1
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
R=$PWD/.devbuild; D=$R/decbench; export LD_LIBRARY_PATH=$R/ff6/lib
if ! $R/ff6/bin/ffmpeg -hide_banner -v verbose -init_hw_device vulkan=vk:0 -f lavfi -i color -t 0.04 -f null - 2>&1 | grep -q 'Device 0'; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
date -u; nvidia-smi --query-gpu=name,driver_version,persistence_mode --format=csv,noheader
B="python3 scripts/bench --ffmpeg $R/ff6 --decbench $D --workdir /tmp/bw"
echo "== 4K 422 HQ"; timeout 170 $B --clips 4k-422hq --modes sw-all,vk,vk-dl,api,api-dl --json $OUT/bench-4k-hq.json 2>&1 | tail -9; date -u
echo "== 4K 4444 XQ"; timeout 150 $B --clips 4k-4444xq --modes sw-all,vk,vk-dl,api --json $OUT/bench-4k-xq.json 2>&1 | tail -8; date -u
echo "== 1080"; timeout 190 $B --clips 1080p-4444-alpha,1080i-422hq-tff,1080p-422hq --modes sw-all,vk,vk-dl,api --json $OUT/bench-1080.json 2>&1 | tail -10; date -u
