#!/bin/bash
# device call 2 of 2026-11-23 (session 4): the 17-patch series as exported (ff12: patch 17 with
# 1/16 headroom), scripts/bench on every clip of issue 7, A/B against the 16-patch build
exec > >(tee $OUT/run.log) 2>&1
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
mkdir -p /tmp/py; for w in .whl/*.whl; do python3 -m zipfile -e $w /tmp/py; done
R=$PWD/.devbuild; A=$R/ff10; B=$R/ff12
export LD_LIBRARY_PATH=$B/lib PYTHONPATH=/tmp/py:$PWD PYPRORES_FFMPEG_DIR=$B PYPRORES_PYTHON=python3
if ! $B/bin/ffmpeg -hide_banner -v verbose -init_hw_device vulkan=vk:0 -f lavfi -i color -t 0.04 -f null - 2>&1 | grep -q 'Device 0'; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
date -u; nvidia-smi --query-gpu=name,driver_version,persistence_mode --format=csv,noheader; head -1 $A/BUILDINFO; head -2 $B/BUILDINFO
python3 -c "import pyprores._native, av, numpy; print('python path: imports ok')"
HW="-init_hw_device vulkan=vk:0 -hwaccel vulkan -hwaccel_output_format vulkan"
us() { local t=${EPOCHREALTIME/./}; echo $((10#$t)); }
stamp() { local t0; t0=$(us); while IFS= read -r l; do local t=${EPOCHREALTIME/./}; printf '%6d ms %s\n' $(( (10#$t - t0) / 1000 )) "$l"; done; }
ff() { local d=$1; shift; LD_LIBRARY_PATH=$d/lib $d/bin/ffmpeg -hide_banner -nostdin "$@"; }
B0="python3 scripts/bench --ffmpeg $B --decbench $R/decbench --workdir /tmp/bw"
echo "== 4K 422 HQ, all modes"
timeout 200 $B0 --clips 4k-422hq --modes sw-all,sw-1,vk,vk-dl,demux,api,api-dl,py --json $OUT/bench-4k-hq.json 2>&1 | tail -13; date -u
echo "== 4K 4444 XQ"
timeout 190 $B0 --clips 4k-4444xq --modes sw-all,vk,vk-dl,demux,api,api-dl --json $OUT/bench-4k-xq.json 2>&1 | tail -10; date -u
echo "== 1080 clips"
timeout 170 $B0 --clips 1080p-4444-alpha,1080i-422hq-tff,1080p-422hq --modes sw-all,vk,vk-dl,demux,api --json $OUT/bench-1080.json 2>&1 | tail -6; date -u
echo "== timeline, 4K HQ, 480 frames"
for d in $A $B; do n=$(basename $d)
  t0=$(us); { ff $d -v debug $HW -stream_loop 9 -i /tmp/bw/4k-422hq.mov -f null - 2>&1; echo "EXIT $?"; } | stamp > $OUT/timeline-$n.log
  echo "$n: wall $(( ($(us) - t0) / 1000 )) ms, $(grep -c 'Allocating buffer' $OUT/timeline-$n.log) buffer allocations; $(grep -m1 'initialised on' $OUT/timeline-$n.log | cut -c1-9) init; first loop EOF $(grep -m1 'EOF while reading' $OUT/timeline-$n.log | cut -c1-9); $(grep -m1 'Statistics' $OUT/timeline-$n.log | cut -c1-9) closed; $(grep EXIT $OUT/timeline-$n.log)"
done
echo "== GPU memory of the process (nvidia-smi, max over the run), 1920 frames"
for c in 4k-422hq 4k-4444xq; do for d in $A $B; do n=$(basename $d)
  nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits -lms 50 > /tmp/mem-$n.csv 2>/dev/null &
  sp=$!; sleep 0.5; ff $d -v error $HW -stream_loop 39 -i /tmp/bw/$c.mov -f null -; sleep 0.3; kill $sp 2>/dev/null
  echo "$c $n: max $(awk -F, '{print $2+0}' /tmp/mem-$n.csv | sort -n | tail -1) MiB over $(wc -l < /tmp/mem-$n.csv) samples"
done; done
TIMEFORMAT='%R'
echo "== A/B whole process, vk, 480 frames, alternating (wall s)"
for c in 4k-422hq 4k-4444xq 1080p-4444-alpha; do for d in $A $B; do : > /tmp/ab-$(basename $d)-$c; done
  for i in 1 2 3 4 5; do for d in $A $B; do { time ff $d -v error $HW -stream_loop 9 -i /tmp/bw/$c.mov -f null - ; } 2>> /tmp/ab-$(basename $d)-$c; done; done
  for d in $A $B; do echo "$c $(basename $d): $(tr '\n' ' ' < /tmp/ab-$(basename $d)-$c)"; done
done
echo "== decbench, A/B"
for c in 4k-422hq 4k-4444xq; do for t in 4 17; do for d in $A $B; do echo -n "$c $(basename $d) threads $t: "; LD_LIBRARY_PATH=$d/lib timeout 40 $R/decbench --threads $t --loops 10 /tmp/bw/$c.mov 2>/dev/null; done; done; done
date -u
