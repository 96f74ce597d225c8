#!/bin/bash
# device call 2 of 2026-11-23 (session 3): the 16-patch series (patches 14-16: download
# fix, fewer queues + limit_queues, downloads through the staging buffer), timed
exec > >(tee $OUT/run.log) 2>&1
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
R=$PWD/.devbuild; F=$R/ff9; export LD_LIBRARY_PATH=$F/lib
if ! $F/bin/ffmpeg -hide_banner -v verbose -init_hw_device vulkan=vk:0 -f lavfi -i color -t 0.04 -f null - 2>&1 | grep -q 'Device 0'; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
date -u; nvidia-smi --query-gpu=name,driver_version,persistence_mode --format=csv,noheader; head -1 $F/BUILDINFO
TIMEFORMAT='%R s wall, %U user, %S sys'
echo "== vkstartup, ff9"; timeout 60 $R/vkstartup 2 | grep -v '^  \[' | tail -4
echo "== ffmpeg -init_hw_device, no decoding"
for o in "" ",limit_queues=4" ",limit_queues=2" ",limit_queues=1"; do for i in 1 2 3; do echo -n "ff9 vk:0$o: "; { time $F/bin/ffmpeg -v error -init_hw_device vulkan=vk:0$o -f lavfi -i color=s=64x64 -frames:v 1 -f null - ; } 2>&1; done; done
for i in 1 2; do echo -n "ff8 vk:0: "; { time LD_LIBRARY_PATH=$R/ff8/lib $R/ff8/bin/ffmpeg -v error -init_hw_device vulkan=vk:0 -f lavfi -i color=s=64x64 -frames:v 1 -f null - ; } 2>&1; done
echo "== ffmpeg -v verbose queue families"; $F/bin/ffmpeg -hide_banner -v verbose -init_hw_device vulkan=vk:0 -f lavfi -i color=s=64x64 -frames:v 1 -f null - 2>&1 | grep -i "queue"
echo "== dlprobe, ff9"; timeout 60 $R/dlprobe 40 | head -3
echo "== dlprobe, ff8"; LD_LIBRARY_PATH=$R/ff8/lib timeout 60 $R/dlprobe 40 | head -3
date -u
B="python3 scripts/bench --ffmpeg $F --decbench $R/decbench --workdir /tmp/bw"
echo "== 4K 422 HQ"; timeout 170 $B --clips 4k-422hq --modes sw-all,vk,vk-dl,api,api-dl --json $OUT/bench-4k-hq.json 2>&1 | tail -9; date -u
echo "== 4K 422 HQ, limit_queues=4"; timeout 120 $B --clips 4k-422hq --modes vk,vk-dl --device 0,limit_queues=4 --json $OUT/bench-4k-hq-lq4.json 2>&1 | tail -4; date -u
echo "== 4K 4444 XQ"; timeout 150 $B --clips 4k-4444xq --modes sw-all,vk,vk-dl,api --json $OUT/bench-4k-xq.json 2>&1 | tail -8; date -u
echo "== 4K 4444 XQ, limit_queues=4"; timeout 90 $B --clips 4k-4444xq --modes vk,vk-dl --device 0,limit_queues=4 --json $OUT/bench-4k-xq-lq4.json 2>&1 | tail -4; date -u
C=/tmp/bw/4k-422hq.mov
for t in 4 16; do echo -n "decbench threads $t: "; timeout 40 $R/decbench --threads $t --loops 20 $C; echo -n "decbench --download threads $t: "; timeout 60 $R/decbench --download --threads $t --loops 5 $C; done
date -u
