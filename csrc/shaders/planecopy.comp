/*
 * planecopy.comp - the planes of a decoded frame (one R16 image per plane,
 * any tiling) into a buffer, each plane packed: rows of `width` 16-bit
 * samples one after the other, no padding, the plane starting on a 4-byte
 * boundary. csrc/shcopy.c dispatches it; csrc/build_ffi.py compiles it.
 *
 * Invocation k of plane z writes 32-bit word k of that plane: samples 2k and
 * 2k + 1 in row-major order (a pair may span two rows when the width is odd;
 * the second half of a plane's last word is zero when it has an odd number of
 * samples). The images are UNORM: v / 65535 read back as round(x * 65535),
 * exact for every 16-bit value.
 */
#version 450

layout(local_size_x = 256) in;

layout(set = 0, binding = 0, r16) uniform readonly image2D src0;
layout(set = 0, binding = 1, r16) uniform readonly image2D src1;
layout(set = 0, binding = 2, r16) uniform readonly image2D src2;
layout(set = 0, binding = 3, r16) uniform readonly image2D src3;
layout(set = 0, binding = 4, std430) writeonly buffer Dst { uint words[]; } dst;

/* plane[i]: x = its first word in dst, y = width, z = height, w = unused */
layout(push_constant, std430) uniform Params { uvec4 plane[4]; } pc;

uint sample_at(uint z, ivec2 p)
{
    float x;
    if (z == 0u)
        x = imageLoad(src0, p).r;
    else if (z == 1u)
        x = imageLoad(src1, p).r;
    else if (z == 2u)
        x = imageLoad(src2, p).r;
    else
        x = imageLoad(src3, p).r;
    return uint(x * 65535.0 + 0.5);
}

void main()
{
    uint z = gl_WorkGroupID.z;
    uvec4 pl = pc.plane[z];
    uint w = pl.y, n = pl.y * pl.z;
    uint words = (n + 1u) >> 1;
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;

    for (uint k = gl_GlobalInvocationID.x; k < words; k += stride) {
        uint s = 2u * k;
        uint y = s / w, x = s - y * w;
        uint lo = sample_at(z, ivec2(x, y)), hi = 0u;
        if (s + 1u < n) {
            x++;
            if (x == w) {
                x = 0u;
                y++;
            }
            hi = sample_at(z, ivec2(x, y));
        }
        dst.words[pl.x + k] = lo | (hi << 16);
    }
}
