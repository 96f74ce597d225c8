#!/bin/bash
# device call 5 of 2026-11-23 (session 3): timeline of a whole ffmpeg run, 4K HQ against
# 1080p 4444 + 16-bit alpha (the latter spends ~0.2 s more outside steady decoding)
exec > >(tee $OUT/run.log) 2>&1
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
R=$PWD/.devbuild; F=$R/ff10; export LD_LIBRARY_PATH=$F/lib
if ! $F/bin/ffmpeg -hide_banner -v verbose -init_hw_device vulkan=vk:0 -f lavfi -i color -t 0.04 -f null - 2>&1 | grep -q 'Device 0'; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
date -u; head -1 $F/BUILDINFO; ls -d ~/.cache/nvidia 2>/dev/null; echo "HOME=$HOME"
timeout 200 python3 scripts/bench --ffmpeg $F --decbench $R/decbench --workdir /tmp/bw --clips 4k-422hq,1080p-4444-alpha --modes vk --json $OUT/bench.json 2>&1 | tail -4
ls -d ~/.cache/nvidia* 2>/dev/null; du -sh ~/.cache/nvidia 2>/dev/null
HW="-init_hw_device vulkan=vk:0 -hwaccel vulkan -hwaccel_output_format vulkan"
us() { local t=${EPOCHREALTIME/./}; echo $((10#$t)); }
stamp() { local t0; t0=$(us); while IFS= read -r l; do local t=${EPOCHREALTIME/./}; printf '%6d ms %s\n' $(( (10#$t - t0) / 1000 )) "$l"; done; }
for c in 4k-422hq 1080p-4444-alpha; do
  for i in 1 2; do
    echo "== timeline $c run $i"
    t0=$(us)
    { $F/bin/ffmpeg -hide_banner -nostdin -v debug $HW -stream_loop 9 -i /tmp/bw/$c.mov -f null - 2>&1; echo "EXIT $?"; } | stamp > $OUT/timeline-$c-$i.log
    echo "wall $(( ($(us) - t0) / 1000 )) ms"
    grep -n -m1 -E "GPU listing" $OUT/timeline-$c-$i.log | head -1
    grep -E "Using device:|initialised on|Opening an output|Output #0|frame=|EXIT|Statistics|Terminating|exiting|Input #0" $OUT/timeline-$c-$i.log | head -12
    grep -c "" $OUT/timeline-$c-$i.log; tail -3 $OUT/timeline-$c-$i.log
  done
  for t in 1 17; do echo -n "decbench $c threads $t: "; timeout 40 $R/decbench --threads $t --loops 10 /tmp/bw/$c.mov; done
done
date -u
