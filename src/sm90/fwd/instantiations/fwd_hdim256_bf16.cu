#include "sm90/fwd/launch.cuh"

HFA_INSTANTIATE_FORWARD(256, 256, __nv_bfloat16)
