// Portability macros shared by host and device code.
//
// ZS_HOST_DEVICE marks per-element math written once for the CPU loops and the CUDA kernels
// (see ../shared/STYLE.md, "One source of math for CPU and CUDA"). Under nvcc it expands to
// __host__ __device__; in a host compiler it is empty. Headers that use it must stay free of
// host-only library calls inside such functions.
#pragma once

#if defined(__CUDACC__)
#define ZS_HOST_DEVICE __host__ __device__
#define ZS_FORCE_INLINE __forceinline__
#else
#define ZS_HOST_DEVICE
#define ZS_FORCE_INLINE inline __attribute__((always_inline))
#endif

#define ZS_DISALLOW_COPY(Type) \
  Type(const Type&) = delete;  \
  Type& operator=(const Type&) = delete
