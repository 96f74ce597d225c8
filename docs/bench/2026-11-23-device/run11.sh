#!/bin/bash
# device call 2 of 2026-11-23: A/B of the perf builds against the 12-patch build
exec > >(tee $OUT/run.log) 2>&1
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
R=$PWD/.devbuild; D=$R/prof/bin/decbench
if ! LD_LIBRARY_PATH=$R/perf/lib $R/perf/bin/ffmpeg -hide_banner -v verbose -init_hw_device vulkan=vk:0 -f lavfi -i color -t 0.04 -f null - 2>&1 | grep -q 'Device 0'; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
date -u
cp $R/perf/bin/ffprobe $R/perfnoimp/bin/ 2>/dev/null; cp $R/perf/bin/ffprobe $R/ff5/bin/ 2>/dev/null
echo "== perf build: bench (bit-exact check + vk, vk-dl)"
LD_LIBRARY_PATH=$R/perf/lib python3 scripts/bench --ffmpeg $R/perf --workdir /tmp/bw --clips 4k-422hq,4k-4444xq --modes vk,vk-dl --json $OUT/bench-perf.json 2>&1 | tail -5
LD_LIBRARY_PATH=$R/perf/lib $R/perf/bin/ffmpeg -hide_banner -v verbose -init_hw_device vulkan=vk:0 -hwaccel vulkan -hwaccel_output_format vulkan -i /tmp/bw/4k-422hq.mov -frames:v 2 -f null - 2>&1 | grep -E "Packets reach|rror"
HQ=/tmp/bw/4k-422hq.mov; XQ=/tmp/bw/4k-4444xq.mov
for round in 1 2; do
for b in ff5 perfnoimp perf; do
  for t in 4 16; do echo "-- $b threads $t HQ"; LD_LIBRARY_PATH=$R/$b/lib $D --threads $t --loops 20 $HQ 2>&1 | grep -E '^\{|rror'; done
  echo "-- $b threads 16 XQ"; LD_LIBRARY_PATH=$R/$b/lib $D --threads 16 --loops 10 $XQ 2>&1 | grep -E '^\{|rror'
  echo "-- $b threads 16 HQ download"; LD_LIBRARY_PATH=$R/$b/lib $D --threads 16 --loops 4 --download $HQ 2>&1 | grep -E '^\{|rror'
done; done
echo "== CLI: base and noimp builds"
for b in ff5 perfnoimp; do LD_LIBRARY_PATH=$R/$b/lib python3 scripts/bench --ffmpeg $R/$b --workdir /tmp/bw --clips 4k-422hq,4k-4444xq --modes vk --json $OUT/bench-$b.json 2>&1 | tail -3; done
echo "== conformance corpus, perf build"
LD_LIBRARY_PATH=$R/perf/lib timeout 200 scripts/conformance-gpu --ffmpeg $R/perf --out $OUT/conformance-perf.md --workdir /tmp/cg --jobs 12 2>&1 | tail -3
date -u
