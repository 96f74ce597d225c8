#!/bin/bash
# device call 6 of 2026-11-23 (session 4): the full corpus on the 18-patch build (ff13), and the
# demux ceiling of the 4K clips once more on the same host as the vk runs
exec > >(tee $OUT/run.log) 2>&1
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
R=$PWD/.devbuild; B=$R/ff13
export LD_LIBRARY_PATH=$B/lib
if ! $B/bin/ffmpeg -hide_banner -v verbose -init_hw_device vulkan=vk:0 -f lavfi -i color -t 0.04 -f null - 2>&1 | grep -q 'Device 0'; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
date -u; nvidia-smi --query-gpu=name,driver_version,persistence_mode --format=csv,noheader; head -1 $B/BUILDINFO
echo "== full corpus, ff13"
timeout 200 scripts/conformance-gpu --ffmpeg $B --jobs 8 --out $OUT/conformance.md --workdir /tmp/cg 2>&1 | tail -2
date -u
timeout 250 python3 scripts/bench --ffmpeg $B --decbench $R/decbench --workdir /tmp/bw --clips 4k-422hq,4k-4444xq --modes sw-all,vk,demux,api --json $OUT/bench-4k.json 2>&1 | tail -5
date -u
