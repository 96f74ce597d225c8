#!/bin/bash
# device call 1 of 2026-11-23 (session 2): VLD coefficient layout variants, timestamp profile
exec > >(tee $OUT/run.log) 2>&1
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
R=$PWD/.devbuild; X=$R/exp; D=$X/bin/decbench; S=$X/spv
export LD_LIBRARY_PATH=$X/lib
if ! $X/bin/ffmpeg -hide_banner -v verbose -init_hw_device vulkan=vk:0 -f lavfi -i color -t 0.04 -f null - 2>&1 | grep -q 'Device 0'; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
date -u; nvidia-smi --query-gpu=name,driver_version,persistence_mode,clocks.sm,clocks.max.sm --format=csv
mkdir -p /tmp/bw
$X/bin/ffmpeg -hide_banner -loglevel error -f lavfi -i testsrc2=s=3840x2160:r=24:d=2 -vf noise=alls=14:allf=t+u,format=yuv422p10le -frames:v 48 -c:v prores_ks -profile:v 3 /tmp/bw/hq.mov & p1=$!
$X/bin/ffmpeg -hide_banner -loglevel error -f lavfi -i testsrc2=s=3840x2160:r=24:d=2 -vf noise=alls=14:allf=t+u,format=yuv444p12le -frames:v 48 -c:v prores_ks -profile:v 5 /tmp/bw/xq.mov & p2=$!
wait $p1 $p2; ls -la /tmp/bw; date -u
declare -A V
V[base]="PRORES_VK_FILL=1 PRORES_VK_SPV_vld=$S/base-vld.spv PRORES_VK_SPV_idct=$S/base-idct.spv"
V[nostore]="PRORES_VK_FILL=1 PRORES_VK_SPV_vld=$S/nostore-vld.spv PRORES_VK_SPV_idct=$S/base-idct.spv"
V[new]="PRORES_VK_NONE=1"
V[newfill]="PRORES_VK_FILL=1"
V[rw]="PRORES_VK_SPV_vld=$S/rw-vld.spv"
echo "== correctness on this GPU (framemd5 vs software, all frames)"
for c in hq xq; do
  fmt=$( [ $c = hq ] && echo yuv422p10le || echo yuv444p12le )
  $X/bin/ffmpeg -hide_banner -loglevel error -i /tmp/bw/$c.mov -f framemd5 -pix_fmt $fmt /tmp/bw/$c.sw.md5
  for v in base new rw; do
    env ${V[$v]} $X/bin/ffmpeg -hide_banner -loglevel error -init_hw_device vulkan=vk:0 -hwaccel vulkan -hwaccel_output_format vulkan -i /tmp/bw/$c.mov -vf hwdownload,format=$fmt -f framemd5 /tmp/bw/$c.$v.md5 2>&1 | grep -v PRORES_PROF | head -3
    echo "$c $v: $(diff <(grep -v '^#' /tmp/bw/$c.sw.md5 | awk -F, '{print $NF}') <(grep -v '^#' /tmp/bw/$c.$v.md5 | awk -F, '{print $NF}') >/dev/null && echo BITEXACT || echo DIFFER) frames=$(grep -vc '^#' /tmp/bw/$c.$v.md5)"
  done
done
date -u
for round in 1 2; do
 for v in base nostore new newfill rw; do
  echo "-- round $round variant $v"
  for t in 1 4; do env ${V[$v]} PRORES_VK_PROF=1 timeout 40 $D --threads $t --loops 5 /tmp/bw/hq.mov 2>&1 | grep -E '^PRORES_PROF gpu|^\{' | sed "s/^/prof t$t: /" | cut -c1-330; done
  for t in 4 16; do env ${V[$v]} timeout 40 $D --threads $t --loops 20 /tmp/bw/hq.mov 2>&1 | grep -E '^\{|rror' | sed "s/^/hq t$t: /"; done
  env ${V[$v]} timeout 40 $D --threads 16 --loops 8 /tmp/bw/xq.mov 2>&1 | grep -E '^\{|rror' | sed "s/^/xq t16: /"
 done
done
date -u
echo "== quick corpus, new (built-in) shaders"
timeout 200 scripts/conformance-gpu --ffmpeg $X --quick --out $OUT/conf-new.md --workdir /tmp/cgn --jobs 12 2>&1 | tail -2
echo "== quick corpus, rw"
env ${V[rw]} timeout 200 scripts/conformance-gpu --ffmpeg $X --quick --out $OUT/conf-rw.md --workdir /tmp/cgr --jobs 12 2>&1 | tail -2
date -u
