#include "sm90/fwd/launch.cuh"

HFA_INSTANTIATE_FORWARD(64, 64, __nv_bfloat16)
