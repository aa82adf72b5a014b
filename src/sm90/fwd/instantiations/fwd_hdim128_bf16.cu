#include "sm90/fwd/launch.cuh"

HFA_INSTANTIATE_FORWARD(128, 128, __nv_bfloat16)
