#!/bin/bash
# device call 1 of 2026-11-23 (session 4): patch 17 (buffers taken once an execution context
# is free, packet-sized requests rounded up) against the 16-patch build; demux-only ceiling
exec > >(tee $OUT/run.log) 2>&1
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
R=$PWD/.devbuild; A=$R/ff10; B=$R/ff11
export LD_LIBRARY_PATH=$B/lib
if ! $B/bin/ffmpeg -hide_banner -v verbose -init_hw_device vulkan=vk:0 -f lavfi -i color -t 0.04 -f null - 2>&1 | grep -q 'Device 0'; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
date -u; nvidia-smi --query-gpu=name,driver_version,persistence_mode --format=csv,noheader; head -1 $A/BUILDINFO; head -2 $B/BUILDINFO
HW="-init_hw_device vulkan=vk:0 -hwaccel vulkan -hwaccel_output_format vulkan"
us() { local t=${EPOCHREALTIME/./}; echo $((10#$t)); }
stamp() { local t0; t0=$(us); while IFS= read -r l; do local t=${EPOCHREALTIME/./}; printf '%6d ms %s\n' $(( (10#$t - t0) / 1000 )) "$l"; done; }
ff() { local d=$1; shift; LD_LIBRARY_PATH=$d/lib $d/bin/ffmpeg -hide_banner -nostdin "$@"; }
B0="python3 scripts/bench --ffmpeg $B --decbench $R/decbench --workdir /tmp/bw"
echo "== clips and bit-exact check (ff11), 4K HQ with sw-all, vk, vk-dl, demux"
timeout 150 $B0 --clips 4k-422hq --modes sw-all,vk,vk-dl,demux,api --json $OUT/bench-4k-hq.json 2>&1 | tail -8; date -u
echo "== timeline, 4K HQ, 480 frames"
for i in 1 2; do for d in $A $B; do n=$(basename $d)
  t0=$(us); { ff $d -v debug $HW -stream_loop 9 -i /tmp/bw/4k-422hq.mov -f null - 2>&1; echo "EXIT $?"; } | stamp > $OUT/timeline-$n-$i.log
  echo "$n run $i: wall $(( ($(us) - t0) / 1000 )) ms, $(grep -c 'Allocating buffer' $OUT/timeline-$n-$i.log) buffer allocations; $(grep -m1 'initialised on' $OUT/timeline-$n-$i.log | cut -c1-9) init; first loop EOF $(grep -m1 'EOF while reading' $OUT/timeline-$n-$i.log | cut -c1-9); $(grep -m1 'Statistics' $OUT/timeline-$n-$i.log | cut -c1-9) closed; $(grep EXIT $OUT/timeline-$n-$i.log)"
done; done
echo "== GPU memory of the process (nvidia-smi, max over the run), 4K HQ, 1920 frames"
for d in $A $B; do n=$(basename $d)
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits -lms 50 > /tmp/mem-$n.csv 2>/dev/null &
  sp=$!; sleep 0.5; ff $d -v error $HW -stream_loop 39 -i /tmp/bw/4k-422hq.mov -f null -; sleep 0.3; kill $sp 2>/dev/null
  echo "$n: max $(awk -F, '{print $2+0}' /tmp/mem-$n.csv | sort -n | tail -1) MiB over $(wc -l < /tmp/mem-$n.csv) samples"
done
date -u
echo "== clips 4K XQ, 1080p alpha (ff11 bench, vk, vk-dl, demux)"
timeout 200 $B0 --clips 4k-4444xq,1080p-4444-alpha --modes vk,vk-dl,demux --json $OUT/bench-xq-alpha.json 2>&1 | tail -5; date -u
TIMEFORMAT='%R'
echo "== A/B whole process, vk, 480 frames, alternating (wall s)"
for c in 4k-422hq 4k-4444xq 1080p-4444-alpha; do for d in $A $B; do echo -n "" > /tmp/ab-$(basename $d)-$c; done
  for i in 1 2 3 4; do for d in $A $B; do { time ff $d -v error $HW -stream_loop 9 -i /tmp/bw/$c.mov -f null - ; } 2>> /tmp/ab-$(basename $d)-$c; done; done
  for d in $A $B; do echo "$c $(basename $d): $(tr '\n' ' ' < /tmp/ab-$(basename $d)-$c)"; done
done
echo "== A/B vk-dl 4K HQ"
for i in 1 2 3; do for d in $A $B; do echo -n "$(basename $d) "; { time ff $d -v error $HW -stream_loop 9 -i /tmp/bw/4k-422hq.mov -vf hwdownload,format=yuv422p10le -f null - ; } 2>&1; done; done
echo "== decbench, 4K HQ"
for t in 4 17; do for d in $A $B; do echo -n "$(basename $d) threads $t: "; LD_LIBRARY_PATH=$d/lib timeout 40 $R/decbench --threads $t --loops 20 /tmp/bw/4k-422hq.mov; done; done
date -u
echo "== full corpus, ff11"
timeout 170 scripts/conformance-gpu --ffmpeg $B --jobs 8 --out $OUT/conformance.md --workdir /tmp/cg 2>&1 | tail -3
date -u
