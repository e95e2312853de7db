# The sources of the CUDA/HIP backend family: one kernel source, compiled as CUDA or HIP.
set(MOE_GPU_SOURCES
  ${PROJECT_SOURCE_DIR}/backends/cuda_hip/align.cu
  ${PROJECT_SOURCE_DIR}/backends/cuda_hip/sum.cu
  ${PROJECT_SOURCE_DIR}/backends/cuda_hip/backend.cu)
