// hip/hip_cooperative_groups.h for the HIP-on-NVIDIA build (see hip_runtime.h beside it): HIP's cooperative
// groups are CUDA's, under the same namespace name.
#pragma once

#include <cooperative_groups.h>
