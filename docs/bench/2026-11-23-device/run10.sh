#!/bin/bash
# device call 1 of 2026-11-23: profile (GPU timestamps per stage, decoder-only
# harness, start-up with and without the GPU held, bandwidths)
exec > >(tee $OUT/run.log) 2>&1
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
B=$PWD/.devbuild/prof
export LD_LIBRARY_PATH=$B/lib
if ! $B/bin/ffmpeg -hide_banner -v verbose -init_hw_device vulkan=vk:0 -f lavfi -i color -t 0.04 -f null - 2>&1 | grep -q 'Device 0'; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
fi
date -u; nvidia-smi -q | grep -i -E "Product Name|Driver Version|Persistence M|Current +: +(Gen|[0-9]+x)|Max +: +Gen" | head; lscpu | grep -E "Model name|^CPU\(s\)|NUMA node\(s\)"
TIMEFORMAT='%R s wall %U user %S sys'
echo "== clips + CLI reference"; python3 scripts/bench --ffmpeg $B --workdir /tmp/bw --clips 4k-422hq,4k-4444xq --modes vk --json $OUT/bench-ref.json 2>&1 | tail -8
HQ=/tmp/bw/4k-422hq.mov; XQ=/tmp/bw/4k-4444xq.mov; D=$B/bin/decbench
startup() { for i in 1 2 3; do time $B/bin/ffmpeg -hide_banner -loglevel error -init_hw_device vulkan=vk:0 -f lavfi -i color -t 0.04 -f null -; done; }
echo "== startup, GPU not held"; startup
db() { echo "-- $*"; env "$@" 2>&1 | grep -E '^\{|PRORES_PROF|rror'; }
echo "== decbench HQ pool x threads"
for p in 4 8 16; do for t in 1 4 16; do db PRORES_VK_PROF=1 PRORES_VK_POOL=$p $D --threads $t --loops 10 $HQ; done; done
echo "== decbench XQ"
for p in 4 16; do db PRORES_VK_PROF=1 PRORES_VK_POOL=$p $D --threads 16 --loops 6 $XQ; done
echo "== decbench download"; db PRORES_VK_POOL=4 $D --download --threads 16 --loops 4 $HQ; db PRORES_VK_POOL=16 $D --download --threads 16 --loops 4 $HQ
echo "== decbench software"; db X=1 $D --hw none --threads 16 --loops 2 $HQ
echo "== CLI with profile"; PRORES_VK_PROF=1 $B/bin/ffmpeg -hide_banner -loglevel warning -init_hw_device vulkan=vk:0 -hwaccel vulkan -hwaccel_output_format vulkan -stream_loop 39 -i $HQ -f null - 2>&1 | grep -E "PROF|rror"
echo "== GPU held by another process"
python3 -c "import torch,time; torch.zeros(1,device='cuda'); print('holder up', flush=True); time.sleep(150)" & HP=$!
sleep 10; startup
db PRORES_VK_POOL=4 $D --threads 16 --loops 10 $HQ
for i in 1 2 3; do time $B/bin/ffmpeg -hide_banner -loglevel error -init_hw_device vulkan=vk:0 -hwaccel vulkan -hwaccel_output_format vulkan -stream_loop 9 -i $HQ -f null -; done
kill $HP
echo "== bandwidth"
python3 - <<'PY'
import time, torch, numpy as np
def bw(f, nbytes, n=50):
    f(); torch.cuda.synchronize(); t=time.perf_counter()
    for _ in range(n): f()
    torch.cuda.synchronize(); return nbytes*n/(time.perf_counter()-t)/1e9
for mb in (4, 64):
    n = mb<<20
    hp = torch.empty(n, dtype=torch.uint8).pin_memory(); hq = torch.empty(n, dtype=torch.uint8); d = torch.empty(n, dtype=torch.uint8, device='cuda')
    print(f"H2D pinned {mb} MB: {bw(lambda: d.copy_(hp, non_blocking=True), n):.1f} GB/s; pageable: {bw(lambda: d.copy_(hq), n):.1f} GB/s; D2H pinned: {bw(lambda: hp.copy_(d, non_blocking=True), n):.1f} GB/s")
a = np.ones(4<<20, np.uint8); b = np.empty_like(a)
t=time.perf_counter()
for _ in range(500): np.copyto(b, a)
print(f"host memcpy 4 MB, one thread: {4*500/1024/(time.perf_counter()-t):.1f} GB/s")
x = torch.empty(33<<20, dtype=torch.uint8, device='cuda'); y = torch.empty_like(x)
print(f"device copy 33 MB: {bw(lambda: y.copy_(x), 2*(33<<20), 200):.0f} GB/s (read+write)")
PY
for i in 1 2; do dd if=$HQ of=/dev/null bs=4M 2>&1 | tail -1; done
date -u
