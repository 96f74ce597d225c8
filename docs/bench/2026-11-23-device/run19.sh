#!/bin/bash
# device call 1 of 2026-11-23 (session 3): where start-up and download time go
exec > >(tee $OUT/run.log) 2>&1
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
R=$PWD/.devbuild; export LD_LIBRARY_PATH=$R/ff8/lib
if ! $R/ff8/bin/ffmpeg -hide_banner -v verbose -init_hw_device vulkan=vk:0 -f lavfi -i color -t 0.04 -f null - 2>&1 | grep -q 'Device 0'; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
date -u; nvidia-smi --query-gpu=name,driver_version,persistence_mode --format=csv,noheader; nproc
TIMEFORMAT='%R s wall, %U user, %S sys'
X=$R/exp2/lib
echo "== vkstartup, ff8 libavutil"; timeout 60 $R/vkstartup 2
echo "== vkstartup, PPR_MAXQ=1 (exp2)"; PPR_MAXQ=1 LD_LIBRARY_PATH=$X timeout 60 $R/vkstartup 2 | grep -v '^  \[' | tail -4
echo "== vkstartup, PPR_MAXQ=4 (exp2)"; PPR_MAXQ=4 LD_LIBRARY_PATH=$X timeout 60 $R/vkstartup 2 | grep -v '^  \[' | tail -4
echo "== ffmpeg -init_hw_device, no decoding"
for q in "" 1 4; do for i in 1 2 3; do echo -n "MAXQ=$q: "; { time env ${q:+PPR_MAXQ=$q} LD_LIBRARY_PATH=$X $R/exp2/bin/ffmpeg -v error -init_hw_device vulkan=vk:0 -f lavfi -i color=s=64x64 -frames:v 1 -f null - ; } 2>&1; done; done
echo "== dlprobe, ff8 (7.1.5 transfer code)"; timeout 60 $R/dlprobe 40
for t in 1 4 8 16; do echo "== dlprobe, exp2, staging, $t copy threads"; PPR_DL_NOMAP=1 PPR_DL_THREADS=$t LD_LIBRARY_PATH=$X timeout 60 $R/dlprobe 40 | head -3; done
date -u
B="python3 scripts/bench --ffmpeg $R/ff8 --decbench $R/decbench --workdir /tmp/bw"
echo "== scripts/bench ff8, 4K HQ"; timeout 170 $B --clips 4k-422hq --modes vk,vk-dl --json $OUT/bench-ff8.json 2>&1 | tail -5; date -u
C=/tmp/bw/4k-422hq.mov; ls -la $C
HW="-init_hw_device vulkan=vk:0 -hwaccel vulkan -hwaccel_output_format vulkan"
for q in "" 1 2 4; do for i in 1 2 3; do echo -n "vk 480 frames, MAXQ=$q: "; { time env ${q:+PPR_MAXQ=$q} LD_LIBRARY_PATH=$X timeout 30 $R/exp2/bin/ffmpeg -hide_banner -nostdin -v error $HW -stream_loop 9 -i $C -f null - ; } 2>&1; done; done
for v in "" "PPR_DL_NOMAP=1 PPR_DL_THREADS=8" "PPR_DL_NOMAP=1 PPR_DL_THREADS=16"; do for i in 1 2; do echo -n "vk-dl 480 frames, $v: "; { time env $v LD_LIBRARY_PATH=$X timeout 30 $R/exp2/bin/ffmpeg -hide_banner -nostdin -v error $HW -stream_loop 9 -i $C -vf hwdownload,format=yuv422p10le -f null - ; } 2>&1; done; done
echo "== vk-dl framemd5 check, staging with 8 threads"
PPR_DL_NOMAP=1 PPR_DL_THREADS=8 LD_LIBRARY_PATH=$X timeout 30 $R/exp2/bin/ffmpeg -hide_banner -nostdin -v error $HW -i $C -vf hwdownload,format=yuv422p10le -f framemd5 /tmp/a.md5
LD_LIBRARY_PATH=$X timeout 60 $R/exp2/bin/ffmpeg -hide_banner -nostdin -v error -i $C -f framemd5 /tmp/b.md5
cmp <(grep -v '^#' /tmp/a.md5) <(grep -v '^#' /tmp/b.md5) && echo "BITEXACT $(grep -vc '^#' /tmp/a.md5) frames"
date -u
for q in "" 1 4; do for t in 4 16; do echo -n "decbench threads $t MAXQ=$q: "; env ${q:+PPR_MAXQ=$q} LD_LIBRARY_PATH=$X timeout 40 $R/decbench --threads $t --loops 20 $C; done; done
for v in "" "PPR_DL_NOMAP=1 PPR_DL_THREADS=8"; do for t in 4 16; do echo -n "decbench --download threads $t $v: "; env $v LD_LIBRARY_PATH=$X timeout 60 $R/decbench --download --threads $t --loops 5 $C; done; done
date -u
