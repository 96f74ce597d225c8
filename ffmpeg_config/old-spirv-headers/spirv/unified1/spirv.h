/* Put ahead of the system's headers by scripts/setup and scripts/check-series when building
 * FFmpeg master on a system whose spirv-headers lack SpvFPEncoding (Debian 12: 1.3.239):
 * configure's check of this header fails, so swscale's SPIR-V backend, which needs newer
 * headers and which nothing here uses, is left out instead of breaking the build. */
#error "spirv-headers too old for FFmpeg master's swscale (no SpvFPEncoding)"
