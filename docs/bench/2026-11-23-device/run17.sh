#!/bin/bash
# device call 4 of 2026-11-23 (session 2): per-context locks and command pools (ff7 = 13 patches + experiments 15-16) against ff6
exec > >(tee $OUT/run.log) 2>&1
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
R=$PWD/.devbuild; D=$R/decbench
if ! LD_LIBRARY_PATH=$R/ff6/lib $R/ff6/bin/ffmpeg -hide_banner -v verbose -init_hw_device vulkan=vk:0 -f lavfi -i color -t 0.04 -f null - 2>&1 | grep -q 'Device 0'; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
date -u
mkdir -p /tmp/bw; F="$R/ff6/bin/ffmpeg -hide_banner -loglevel error -f lavfi -i testsrc2=s=3840x2160:r=24:d=2 -frames:v 48"
LD_LIBRARY_PATH=$R/ff6/lib $F -vf noise=alls=14:allf=t+u,format=yuv422p10le -c:v prores_ks -profile:v 3 /tmp/bw/hq.mov & p1=$!
LD_LIBRARY_PATH=$R/ff6/lib $F -vf noise=alls=14:allf=t+u,format=yuv444p12le -c:v prores_ks -profile:v 5 /tmp/bw/xq.mov & p2=$!
LD_LIBRARY_PATH=$R/ff6/lib $R/ff6/bin/ffmpeg -hide_banner -loglevel error -f lavfi -i testsrc2=s=1920x1080:r=24:d=2 -vf noise=alls=14:allf=t+u,format=yuva444p10le -frames:v 48 -c:v prores_ks -profile:v 4 -alpha_bits 16 /tmp/bw/al.mov & p3=$!
wait $p1 $p2 $p3; date -u
echo "== correctness, ff7, 16 threads"
for c in hq:yuv422p10le xq:yuv444p12le al:yuva444p12le; do n=${c%%:*}; fmt=${c#*:}
  a=$(LD_LIBRARY_PATH=$R/ff7/lib $R/ff7/bin/ffmpeg -hide_banner -loglevel error -i /tmp/bw/$n.mov -f framemd5 -pix_fmt $fmt - | grep -v '^#' | awk -F, '{print $NF}' | md5sum)
  b=$(LD_LIBRARY_PATH=$R/ff7/lib $R/ff7/bin/ffmpeg -hide_banner -loglevel error -threads 16 -init_hw_device vulkan=vk:0 -hwaccel vulkan -hwaccel_output_format vulkan -i /tmp/bw/$n.mov -vf hwdownload,format=$fmt -f framemd5 - | grep -v '^#' | awk -F, '{print $NF}' | md5sum)
  echo "$n: sw $a vk $b $([ "$a" = "$b" ] && echo BITEXACT || echo DIFFER)"
done
date -u
echo "== decbench A/B"
for r in 1 2 3; do for b in ff6 ff7; do
  for t in 4 8 16; do echo "-- $b HQ threads $t: $(LD_LIBRARY_PATH=$R/$b/lib timeout 30 $D --threads $t --loops 20 /tmp/bw/hq.mov 2>&1 | grep -E '^\{|rror')"; done
  echo "-- $b XQ threads 16: $(LD_LIBRARY_PATH=$R/$b/lib timeout 30 $D --threads 16 --loops 10 /tmp/bw/xq.mov 2>&1 | grep -E '^\{|rror')"
done; done
date -u
