# The sources of the CUDA/HIP backend family: one kernel source, compiled as CUDA or HIP.
set(MOE_GPU_SOURCES
  ${PROJECT_SOURCE_DIR}/backends/cuda_hip/align.cu
  ${PROJECT_SOURCE_DIR}/backends/cuda_hip/align_ep.cu
  ${PROJECT_SOURCE_DIR}/backends/cuda_hip/sum.cu
  ${PROJECT_SOURCE_DIR}/backends/cuda_hip/topk_gating.cu
  ${PROJECT_SOURCE_DIR}/backends/cuda_hip/permute.cu
  ${PROJECT_SOURCE_DIR}/backends/cuda_hip/combine.cu
  ${PROJECT_SOURCE_DIR}/backends/cuda_hip/backend.cu
  ${PROJECT_SOURCE_DIR}/backends/cuda_hip/ep_layout.cu     # expert parallelism (moe/ep.h): layout, verdict
  ${PROJECT_SOURCE_DIR}/backends/cuda_hip/ep_exchange.cu)  # pack, unpack, reduce

# The CUDA language for the library, shared by the CUDA backend and the HIP backend's NVIDIA platform: the
# architectures (MOE_CUDA_ARCHITECTURES, default 90;80), the static runtime, and IEEE arithmetic only (moe_sum
# must give the reference's bits: no fast-math, no flush-to-zero, no contraction). A macro: enable_language
# must run at file scope.
macro(moe_gpu_cuda_language)
  set(MOE_CUDA_ARCHITECTURES "90;80" CACHE STRING "CUDA architectures of the GPU kernels")
  if(NOT CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES ${MOE_CUDA_ARCHITECTURES})
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  set_target_properties(moe_routing PROPERTIES CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}"
                                               CUDA_SEPARABLE_COMPILATION OFF)
  target_compile_options(moe_routing PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-ftz=false -prec-div=true -prec-sqrt=true
                                               -fmad=false -Xptxas=-warn-spills,-warn-lmem-usage>)
  target_link_libraries(moe_routing PUBLIC CUDA::cudart_static)
  set(MOE_PACKAGE_DEPENDENCIES "find_dependency(CUDAToolkit)")
endmacro()

# moe_gpu_helper_sources(target files...): files outside the library (the tests' and the benchmark's GPU
# sources, which use backends/cuda_hip/gpu_runtime.hpp) compiled as the library's GPU sources are: in its
# language, with its include folders and definitions. The backend file sets MOE_GPU_LANGUAGE,
# MOE_GPU_INCLUDES and MOE_GPU_DEFINITIONS; the tests' and perf's CMakeLists name their files.
function(moe_gpu_helper_sources target)
  set(files ${ARGN})
  set_source_files_properties(${files} PROPERTIES LANGUAGE ${MOE_GPU_LANGUAGE})
  target_sources(${target} PRIVATE ${files})
  target_include_directories(${target} PRIVATE ${MOE_GPU_INCLUDES} ${PROJECT_SOURCE_DIR}/core/src)
  target_compile_definitions(${target} PRIVATE ${MOE_GPU_DEFINITIONS})
  if(MOE_GPU_LANGUAGE STREQUAL "CUDA")
    set_target_properties(${target} PROPERTIES CUDA_ARCHITECTURES "${CMAKE_CUDA_ARCHITECTURES}")
  endif()
endfunction()
