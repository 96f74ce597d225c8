#!/bin/bash
# device call 5 of 2026-11-23 (session 4): the 18-patch build (ff13: new patch 16 keeps staging
# buffer offsets a multiple of 4). The odd-width regression input under the validation layer on
# ff12 (before) and ff13 (after), scripts/fuzz-gpu on call 4's seeds, A/B timing against ff10
exec > >(tee $OUT/run.log) 2>&1
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
mkdir -p /opt/vl /tmp/py
dpkg -x .devbuild/vl/*.deb /opt/vl
for w in .whl/*.whl; do python3 -m zipfile -e $w /tmp/py; done
R=$PWD/.devbuild
export PYTHONPATH=/tmp/py:$PWD PYPRORES_PYTHON=python3
if ! LD_LIBRARY_PATH=$R/ff13/lib $R/ff13/bin/ffmpeg -hide_banner -v verbose -init_hw_device vulkan=vk:0 -f lavfi -i color -t 0.04 -f null - 2>&1 | grep -q 'Device 0'; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
date -u; head -4 $R/ff13/BUILDINFO
echo "== odd-width regression input, csrc session, validation layer"
for b in ff12 ff13; do
  VK_LAYER_PATH=/opt/vl/usr/share/vulkan/explicit_layer.d LD_LIBRARY_PATH=$R/$b/lib:/opt/vl/usr/lib/x86_64-linux-gnu PYPRORES_FFMPEG_DIR=$R/$b PYPRORES_VALIDATION=1 python3 - $b <<'PY'
import sys, numpy as np, pyprores.native as n
pkt = open("tests/data/regressions/odd-width-17x33-4444a8.bin", "rb").read()
a = n.Session("software").decode(pkt, "ap4h")
s = n.Session("vulkan", device="0")
b = s.decode(pkt, "ap4h")
eq = all(np.array_equal(a.planes[k], b.planes[k]) for k in a.planes)
msgs = [m for m in s.validation_messages if "07746" in m]
print(sys.argv[1], "bit-exact:", eq, "validation messages:", s.validation_count, "of them 07746:", len(msgs))
for m in s.validation_messages[:3]: print("   ", m[:220])
PY
done
date -u
echo "== fuzz-gpu ff13, seeds 71-75"
VK_LAYER_PATH=/opt/vl/usr/share/vulkan/explicit_layer.d LD_LIBRARY_PATH=$R/ff13/lib:/opt/vl/usr/lib/x86_64-linux-gnu PYPRORES_FFMPEG_DIR=$R/ff13 scripts/fuzz-gpu --jobs 5 --time 150 --seed-base 70 /tmp/fg13 > /tmp/fg13.out 2>&1; echo "fuzz-gpu rc=$?"
tail -7 /tmp/fg13/summary.md; cp /tmp/fg13/summary.md $OUT/fuzz-gpu-summary.md
date -u
export LD_LIBRARY_PATH=$R/ff13/lib
HW="-init_hw_device vulkan=vk:0 -hwaccel vulkan -hwaccel_output_format vulkan"
timeout 150 python3 scripts/bench --ffmpeg $R/ff13 --decbench $R/decbench --workdir /tmp/bw --clips 4k-422hq --modes sw-all,vk,vk-dl,demux,api,api-dl,py --json $OUT/bench-4k-hq.json 2>&1 | tail -4
TIMEFORMAT='%R'
echo "== A/B whole process, vk / vk-dl, 4K HQ, alternating (wall s)"
for m in vk vk-dl; do for d in ff10 ff13; do : > /tmp/ab-$d-$m; done
  if [ $m = vk ]; then X="-f null -"; else X="-vf hwdownload,format=yuv422p10le -f null -"; fi
  for i in 1 2 3 4 5; do for d in ff10 ff13; do { time LD_LIBRARY_PATH=$R/$d/lib $R/$d/bin/ffmpeg -nostdin -v error $HW -stream_loop 9 -i /tmp/bw/4k-422hq.mov $X ; } 2>> /tmp/ab-$d-$m; done; done
  for d in ff10 ff13; do echo "$m $d: $(tr '\n' ' ' < /tmp/ab-$d-$m)"; done
done
for t in 4 17; do for d in ff10 ff13; do echo -n "decbench $d threads $t: "; LD_LIBRARY_PATH=$R/$d/lib timeout 40 $R/decbench --threads $t --loops 20 /tmp/bw/4k-422hq.mov 2>/dev/null; done; done
date -u
