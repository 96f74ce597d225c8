#!/bin/bash
# device call 4 of 2026-11-23 (session 4): call 3's fuzz-gpu on ff12 reported 26 validation
# messages; the same seeds on ff12 and on ff10 (16 patches) side by side, with the findings kept
exec > >(tee $OUT/run.log) 2>&1
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
mkdir -p /opt/vl /tmp/py
dpkg -x .devbuild/vl/*.deb /opt/vl
for w in .whl/*.whl; do python3 -m zipfile -e $w /tmp/py; done
R=$PWD/.devbuild
export PYTHONPATH=/tmp/py:$PWD PYPRORES_PYTHON=python3
if ! LD_LIBRARY_PATH=$R/ff12/lib $R/ff12/bin/ffmpeg -hide_banner -v verbose -init_hw_device vulkan=vk:0 -f lavfi -i color -t 0.04 -f null - 2>&1 | grep -q 'Device 0'; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
export VK_LAYER_PATH=/opt/vl/usr/share/vulkan/explicit_layer.d
date -u
pids=()
for b in ff12 ff10; do
  LD_LIBRARY_PATH=$R/$b/lib:/opt/vl/usr/lib/x86_64-linux-gnu PYPRORES_FFMPEG_DIR=$R/$b scripts/fuzz-gpu --jobs 5 --time 120 --seed-base 70 /tmp/fg-$b > /tmp/fg-$b.out 2>&1 &
  pids+=($!)
done
for p in "${pids[@]}"; do wait $p; done
date -u
for b in ff12 ff10; do echo "== $b"; tail -6 /tmp/fg-$b/summary.md; done
python3 - <<'PY'
import glob, json, collections
for b in ("ff12", "ff10"):
    kinds = collections.Counter(); first = {}
    for f in sorted(glob.glob(f"/tmp/fg-{b}/fuzz-s*.json")):
        for x in json.load(open(f))["findings"]:
            k = (x["kind"], x["seed_name"], x["mutator"])
            kinds[x["kind"]] += 1
            first.setdefault(x["kind"], []).append(x)
    print(b, dict(kinds))
    for kind, xs in first.items():
        for x in xs[:4]:
            print(" ", kind, x["seed_name"], x["mutator"], x["detail"][:80], "|", x["message"][:700].replace("\n", " / "))
PY
mkdir -p $OUT/f; for b in ff12 ff10; do cp /tmp/fg-$b/summary.md $OUT/f/$b-summary.md; cat /tmp/fg-$b/fuzz-s*.json > $OUT/f/$b-findings.json; done
date -u
