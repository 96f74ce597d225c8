"""Decoding: the C library through cffi (native), streaming frames to numpy (stream), frames in
flight (pipeline), the decoder under test (candidate) and the reference software decode (demux)."""
