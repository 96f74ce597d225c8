#!/usr/bin/env python3
"""Seed corpora for the libFuzzer targets in csrc/fuzz/, from real ProRes packets.

    make_seeds.py FFMPEG OUTDIR

Encodes tiny clips with FFMPEG (prores_ks and prores_aw: profiles 0-5, alpha
8/16-bit, TFF and BFF interlacing, 1/2/4/8 macroblocks per slice, custom
quantisation matrices, sizes that are not multiples of 16) to raw ProRes
(`-f rawvideo`: packets back to back, each starting with its 32-bit frame
size), splits them into packets and writes

  OUTDIR/parser/ and OUTDIR/slices/   4-byte prefix (byte 0: codec tag index,
                                      as the targets' table) + one packet
  OUTDIR/target_dec/                  FFmpeg's tools/target_dec_fuzzer.c input:
                                      the packets joined by "FUZZ-TAG" and the
                                      1024-byte parameter trailer (parser on,
                                      codec tag set)

Standard library only; run with any Python 3.
"""

import os
import struct
import subprocess
import sys
import tempfile

# index = byte 0 of the targets' prefix (see tags[] in fuzz_parser.c)
TAGS = ["apco", "apcs", "apcn", "apch", "ap4h", "ap4x"]

# name, size, filters after testsrc2, encoder args, profile (= tag index)
CLIPS = [
    ("proxy", "40x24", "format=yuv422p10le", ["-c:v", "prores_ks", "-profile:v", "0"], 0),
    ("lt", "64x48", "format=yuv422p10le", ["-c:v", "prores_ks", "-profile:v", "1"], 1),
    ("std", "72x40", "format=yuv422p10le", ["-c:v", "prores_ks", "-profile:v", "2"], 2),
    ("hq", "72x40", "format=yuv422p10le", ["-c:v", "prores_ks", "-profile:v", "3"], 3),
    ("hq-big", "176x72", "format=yuv422p10le",
     ["-c:v", "prores_ks", "-profile:v", "3", "-mbs_per_slice", "4"], 3),
    ("hq-mbs1", "50x34", "format=yuv422p10le",
     ["-c:v", "prores_ks", "-profile:v", "3", "-mbs_per_slice", "1"], 3),
    ("hq-mbs2", "120x20", "format=yuv422p10le",
     ["-c:v", "prores_ks", "-profile:v", "3", "-mbs_per_slice", "2"], 3),
    ("std-qmat", "64x32", "format=yuv422p10le",
     ["-c:v", "prores_ks", "-profile:v", "2", "-quant_mat", "proxy"], 2),
    ("4444", "48x40", "format=yuv444p10le", ["-c:v", "prores_ks", "-profile:v", "4"], 4),
    ("4444-a8", "40x33", "format=yuva444p10le",
     ["-c:v", "prores_ks", "-profile:v", "4", "-alpha_bits", "8"], 4),
    ("4444-a16", "48x40", "format=yuva444p10le",
     ["-c:v", "prores_ks", "-profile:v", "4", "-alpha_bits", "16"], 4),
    ("xq-a16", "56x24", "format=yuva444p10le",
     ["-c:v", "prores_ks", "-profile:v", "5", "-alpha_bits", "16"], 5),
    ("tff", "64x50", "setfield=tff,format=yuv422p10le",
     ["-c:v", "prores_ks", "-profile:v", "2", "-flags", "+ildct"], 2),
    ("bff-444", "48x40", "setfield=bff,format=yuv444p10le",
     ["-c:v", "prores_ks", "-profile:v", "4", "-flags", "+ildct"], 4),
    ("aw-hq", "72x40", "format=yuv422p10le", ["-c:v", "prores_aw", "-profile:v", "3"], 3),
    ("aw-4444-a", "48x32", "format=yuva444p10le", ["-c:v", "prores_aw", "-profile:v", "4"], 4),
]


def packets(raw: bytes):
    pos = 0
    while pos + 8 <= len(raw):
        size = struct.unpack(">I", raw[pos:pos + 4])[0]
        if size < 8 or pos + size > len(raw) or raw[pos + 4:pos + 8] != b"icpf":
            raise ValueError(f"not a ProRes packet at byte {pos}")
        yield raw[pos:pos + size]
        pos += size


def dec_trailer(tag: str) -> bytes:
    """The 1024 bytes target_dec_fuzzer.c reads its parameters from."""
    t = b""
    t += struct.pack("<iiqi", 0, 0, 0, 0)    # width, height, bit_rate, bits_per_coded_sample
    t += bytes([0x01])                       # flags: bit 0 = use the codec's parser
    t += struct.pack("<i", 0)                # extradata_size
    t += struct.pack("<iii", 0, 0, 0)        # sample_rate, channels, block_align
    t += tag.encode("ascii")                 # codec_tag (little-endian fourcc)
    t += struct.pack("<qq", 0, 0)            # keyframes, request_channel_layout
    t += bytes([0])                          # idct_algo
    t += struct.pack("<q", 0)                # flushpattern
    t += bytes([206])                        # skip_frame: 206 - 254 + AVDISCARD_ALL = default
    t += struct.pack("<q", 0)                # flags64
    t += struct.pack("<i", 0)                # workaround_bugs
    return t + bytes(1024 - len(t))


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    ffmpeg, out = sys.argv[1], sys.argv[2]
    for sub in ("parser", "slices", "target_dec"):
        os.makedirs(os.path.join(out, sub), exist_ok=True)
    n = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, size, vf, args, profile in CLIPS:
            raw = os.path.join(tmp, name + ".prores")
            cmd = [ffmpeg, "-hide_banner", "-nostdin", "-v", "error", "-y", "-f", "lavfi",
                   "-i", f"testsrc2=s={size}:r=25:d=0.08,{vf}", *args, "-f", "rawvideo", raw]
            subprocess.run(cmd, check=True)
            pkts = list(packets(open(raw, "rb").read()))
            tag = TAGS[profile]
            prefix = bytes([profile, 0x5a, 0x17, 0x03])
            for sub in ("parser", "slices"):
                with open(os.path.join(out, sub, f"{name}-{tag}"), "wb") as f:
                    f.write(prefix + pkts[0])
            # parser: also two packets back to back, cut at random sizes (mode 1)
            with open(os.path.join(out, "parser", f"{name}-{tag}-cut"), "wb") as f:
                f.write(bytes([profile | 0x10, 0x12, 0x34, 0x56]) + b"".join(pkts[:2]))
            with open(os.path.join(out, "target_dec", f"{name}-{tag}"), "wb") as f:
                f.write(b"FUZZ-TAG".join(pkts[:2]) + b"FUZZ-TAG" + dec_trailer(tag))
            n += 1
    print(f"make_seeds: {n} clips -> {out}/{{parser,slices,target_dec}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
