# CUDA backend: backends/cuda_hip/ compiled as CUDA. MOE_CUDA_ARCHITECTURES (default 90;80) picks the GPUs.
include(MoEGpuSources)
moe_gpu_cuda_language()
target_sources(moe_routing PRIVATE ${MOE_GPU_SOURCES})
target_include_directories(moe_routing PRIVATE ${PROJECT_SOURCE_DIR}/backends/cuda_hip)
set(MOE_GPU_LANGUAGE CUDA)
set(MOE_GPU_INCLUDES ${PROJECT_SOURCE_DIR}/backends/cuda_hip)
set(MOE_GPU_DEFINITIONS "")
