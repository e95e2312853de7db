# CUDA backend: backends/cuda_hip/ compiled as CUDA. MOE_CUDA_ARCHITECTURES (default 90;80) picks the GPUs.
include(MoEGpuSources)
moe_gpu_cuda_language()
target_sources(moe_routing PRIVATE ${MOE_GPU_SOURCES})
target_include_directories(moe_routing PRIVATE ${PROJECT_SOURCE_DIR}/backends/cuda_hip)

function(moe_backend_test_setup target)  # CUDA-only tests: every hot call under graph capture
  target_sources(${target} PRIVATE ${PROJECT_SOURCE_DIR}/tests/test_graph_capture.cu)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/backends/cuda_hip ${PROJECT_SOURCE_DIR}/core/src)
endfunction()

function(moe_backend_perf_setup target)  # graph + event timing
  target_sources(${target} PRIVATE ${PROJECT_SOURCE_DIR}/perf/measure_gpu.cu)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/backends/cuda_hip ${PROJECT_SOURCE_DIR}/core/src)
endfunction()
