#!/bin/bash
# device call 3 of 2026-11-23: the 18-patch series (perf build) against the 12-patch build
exec > >(tee $OUT/run.log) 2>&1
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
R=$PWD/.devbuild; D=$R/perf/bin/decbench
if ! LD_LIBRARY_PATH=$R/perf/lib $R/perf/bin/ffmpeg -hide_banner -v verbose -init_hw_device vulkan=vk:0 -f lavfi -i color -t 0.04 -f null - 2>&1 | grep -q 'Device 0'; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
date -u; nvidia-smi --query-gpu=name,driver_version,persistence_mode --format=csv
cp $R/perf/bin/ffprobe $R/ff5/bin/ 2>/dev/null
echo "== perf build: bench"
LD_LIBRARY_PATH=$R/perf/lib timeout 330 python3 scripts/bench --ffmpeg $R/perf --decbench $D --workdir /tmp/bw --clips 4k-422hq,4k-4444xq --modes sw-all,vk,vk-dl,api,api-dl --json $OUT/bench-perf.json 2>&1 | tail -12
HQ=/tmp/bw/4k-422hq.mov; XQ=/tmp/bw/4k-4444xq.mov
echo "== decbench A/B"
for b in ff5 perf ff5 perf; do
  for t in 4 16; do echo "-- $b threads $t HQ"; LD_LIBRARY_PATH=$R/$b/lib timeout 30 $D --threads $t --loops 20 $HQ 2>&1 | grep -E '^\{|rror'; done
  echo "-- $b threads 16 XQ"; LD_LIBRARY_PATH=$R/$b/lib timeout 30 $D --threads 16 --loops 10 $XQ 2>&1 | grep -E '^\{|rror'
done
echo "== CLI vk, 12-patch build"
LD_LIBRARY_PATH=$R/ff5/lib timeout 90 python3 scripts/bench --ffmpeg $R/ff5 --workdir /tmp/bw --clips 4k-422hq,4k-4444xq --modes vk --json $OUT/bench-ff5.json 2>&1 | tail -3
echo "== conformance corpus, perf build"
LD_LIBRARY_PATH=$R/perf/lib timeout 150 scripts/conformance-gpu --ffmpeg $R/perf --out $OUT/conformance-perf.md --workdir /tmp/cg --jobs 12 2>&1 | tail -3
date -u
