#include "sm90/fwd/launch.cuh"

HFA_INSTANTIATE_FORWARD(192, 192, __half)
