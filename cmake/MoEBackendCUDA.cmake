# CUDA backend: backends/cuda_hip/ compiled as CUDA. MOE_CUDA_ARCHITECTURES (default 90;80) picks the GPUs.
set(MOE_CUDA_ARCHITECTURES "90;80" CACHE STRING "CUDA architectures of the CUDA backend")
if(NOT CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES ${MOE_CUDA_ARCHITECTURES})
endif()
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
include(MoEGpuSources)
target_sources(moe_routing PRIVATE ${MOE_GPU_SOURCES})
set_target_properties(moe_routing PROPERTIES CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}")
target_include_directories(moe_routing PRIVATE ${PROJECT_SOURCE_DIR}/backends/cuda_hip)
# IEEE arithmetic only: moe_sum must give the reference's bits (no fast-math, no flush-to-zero).
target_compile_options(moe_routing PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-ftz=false -prec-div=true -prec-sqrt=true
                                             -fmad=false -Xptxas=-warn-spills,-warn-lmem-usage>)
target_link_libraries(moe_routing PUBLIC CUDA::cudart_static)
set_target_properties(moe_routing PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)
set(MOE_PACKAGE_DEPENDENCIES "find_dependency(CUDAToolkit)")

function(moe_backend_test_setup target)  # CUDA-only tests: every hot call under graph capture
  target_sources(${target} PRIVATE ${PROJECT_SOURCE_DIR}/tests/test_graph_capture.cu)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/backends/cuda_hip ${PROJECT_SOURCE_DIR}/core/src)
endfunction()

function(moe_backend_perf_setup target)  # graph + event timing
  target_sources(${target} PRIVATE ${PROJECT_SOURCE_DIR}/perf/measure_gpu.cu)
  target_include_directories(${target} PRIVATE ${PROJECT_SOURCE_DIR}/backends/cuda_hip ${PROJECT_SOURCE_DIR}/core/src)
endfunction()
