#!/bin/bash
# device call 4 of 2026-11-23: which of patches 13-18 made the decoder slower
exec > >(tee $OUT/run.log) 2>&1
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
R=$PWD/.devbuild; D=$R/perf/bin/decbench
if ! LD_LIBRARY_PATH=$R/perf/lib $R/perf/bin/ffmpeg -hide_banner -v verbose -init_hw_device vulkan=vk:0 -f lavfi -i color -t 0.04 -f null - 2>&1 | grep -q 'Device 0'; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
date -u
mkdir -p /tmp/bw; LD_LIBRARY_PATH=$R/ff5/lib $R/ff5/bin/ffmpeg -hide_banner -loglevel error -f lavfi -i testsrc2=s=3840x2160:r=24:d=2 -vf noise=alls=14:allf=t+u,format=yuv422p10le -frames:v 48 -c:v prores_ks -profile:v 3 /tmp/bw/4k-422hq.mov
HQ=/tmp/bw/4k-422hq.mov
for r in 1 2; do for b in ff5 v1 v2 perf; do
  for t in 4 16; do echo "-- $b threads $t"; LD_LIBRARY_PATH=$R/$b/lib timeout 30 $D --threads $t --loops 20 $HQ 2>&1 | grep -E '^\{|rror'; done
done; done
date -u
