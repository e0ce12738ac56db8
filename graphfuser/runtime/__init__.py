"""Compile, cache and launch generated kernels (NVRTC + driver API; system C++ compiler + ctypes)."""
