#!/bin/bash
# device call 5 of 2026-11-23 (session 2): full conformance corpus on the final 13-patch build
exec > >(tee $OUT/run.log) 2>&1
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
R=$PWD/.devbuild; export LD_LIBRARY_PATH=$R/ff8/lib
if ! $R/ff8/bin/ffmpeg -hide_banner -v verbose -init_hw_device vulkan=vk:0 -f lavfi -i color -t 0.04 -f null - 2>&1 | grep -q 'Device 0'; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; head -1 $R/ff8/BUILDINFO
timeout 420 scripts/conformance-gpu --ffmpeg $R/ff8 --jobs 8 --out $OUT/conformance-gpu.md --workdir /tmp/cg 2>&1 | tail -4
date -u
