#!/bin/bash
# device call 2 of 2026-11-23 (session 2): the 13-patch series (ff6) against the 12-patch build (ff5)
exec > >(tee $OUT/run.log) 2>&1
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
R=$PWD/.devbuild; D=$R/decbench
if ! LD_LIBRARY_PATH=$R/ff6/lib $R/ff6/bin/ffmpeg -hide_banner -v verbose -init_hw_device vulkan=vk:0 -f lavfi -i color -t 0.04 -f null - 2>&1 | grep -q 'Device 0'; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
date -u; nvidia-smi --query-gpu=name,driver_version,persistence_mode,clocks.sm,clocks.max.sm --format=csv; nproc
echo "== bench, 13-patch build"
LD_LIBRARY_PATH=$R/ff6/lib timeout 400 python3 scripts/bench --ffmpeg $R/ff6 --decbench $D --workdir /tmp/bw --clips 4k-422hq,4k-4444xq,1080p-4444-alpha,1080i-422hq-tff,1080p-422hq --modes sw-all,vk,vk-dl,api,api-dl --json $OUT/bench-ff6.json 2>&1 | tail -16
date -u
HQ=/tmp/bw/4k-422hq.mov; XQ=/tmp/bw/4k-4444xq.mov
echo "== decbench A/B (12 patches: ff5, 13 patches: ff6)"
for r in 1 2; do for b in ff5 ff6; do
  for t in 4 8 16; do echo "-- $b HQ threads $t: $(LD_LIBRARY_PATH=$R/$b/lib timeout 30 $D --threads $t --loops 20 $HQ 2>&1 | grep -E '^\{|rror')"; done
  echo "-- $b XQ threads 16: $(LD_LIBRARY_PATH=$R/$b/lib timeout 30 $D --threads 16 --loops 10 $XQ 2>&1 | grep -E '^\{|rror')"
done; done
echo "== ffmpeg CLI steady, 12-patch build, same clips"
LD_LIBRARY_PATH=$R/ff5/lib timeout 100 python3 scripts/bench --ffmpeg $R/ff5 --workdir /tmp/bw --clips 4k-422hq,4k-4444xq --modes vk --json $OUT/bench-ff5.json 2>&1 | tail -4
date -u
