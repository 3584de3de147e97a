// HEADROOM_HOST_DEVICE marks an inline function that runs on the host and, compiled by nvcc,
// on a CUDA device too: the arithmetic both backends must share to the bit (random draws,
// optimizer steps, activation derivatives).
#ifndef HEADROOM_UTIL_HOST_DEVICE_H_
#define HEADROOM_UTIL_HOST_DEVICE_H_

#ifdef __CUDACC__
#define HEADROOM_HOST_DEVICE __host__ __device__
#else
#define HEADROOM_HOST_DEVICE
#endif

#endif  // HEADROOM_UTIL_HOST_DEVICE_H_
