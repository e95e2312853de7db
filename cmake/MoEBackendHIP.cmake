# HIP backend: the SAME kernel sources as CUDA (backends/cuda_hip/), compiled with MOE_GPU_HIP so that the
# runtime calls go through hip* names. Two platforms:
#   MOE_HIP_PLATFORM=AMD (default): HIP language (clang), MOE_HIP_ARCHITECTURES (default gfx90a;gfx940).
#   MOE_HIP_PLATFORM=NVIDIA: nvcc compiles the same sources as CUDA, with backends/cuda_hip/hip_on_nvidia/
#     (our mapping of the hip* names used onto CUDA) first on the include path.
set(MOE_HIP_PLATFORM "AMD" CACHE STRING "HIP platform: AMD or NVIDIA")
set_property(CACHE MOE_HIP_PLATFORM PROPERTY STRINGS AMD NVIDIA)
if(NOT MOE_HIP_PLATFORM MATCHES "^(AMD|NVIDIA)$")
  message(FATAL_ERROR "MOE_HIP_PLATFORM='${MOE_HIP_PLATFORM}': valid values are AMD, NVIDIA")
endif()
include(MoEGpuSources)
set(moe_gpu_includes ${PROJECT_SOURCE_DIR}/backends/cuda_hip)

if(MOE_HIP_PLATFORM STREQUAL "NVIDIA")
  moe_gpu_cuda_language()
  set(moe_gpu_language CUDA)
  list(PREPEND moe_gpu_includes ${PROJECT_SOURCE_DIR}/backends/cuda_hip/hip_on_nvidia)
else()
  set(MOE_HIP_ARCHITECTURES "gfx90a;gfx940" CACHE STRING
      "AMD GPU targets (gfx942/gfx950 need a ROCm newer than Debian's 5.2)")
  if(NOT CMAKE_HIP_ARCHITECTURES)
    set(CMAKE_HIP_ARCHITECTURES ${MOE_HIP_ARCHITECTURES})
  endif()
  if(MOE_HIP_DEBIAN_LAYOUT)
    # CMake looks for <ROCm root>/lib/cmake/hip-lang; Debian keeps it under the multiarch cmake folder.
    set(root ${CMAKE_BINARY_DIR}/debian-rocm-root)
    file(MAKE_DIRECTORY ${root}/lib/cmake)
    file(CREATE_LINK /usr/lib/x86_64-linux-gnu/cmake/hip-lang ${root}/lib/cmake/hip-lang SYMBOLIC)
    set(CMAKE_HIP_COMPILER_ROCM_ROOT ${root} CACHE PATH "" FORCE)
    list(APPEND CMAKE_PREFIX_PATH /usr/lib/x86_64-linux-gnu/cmake)
    set(ENV{CMAKE_PREFIX_PATH} "/usr/lib/x86_64-linux-gnu/cmake")  # seen by try_compile too
  endif()
  enable_language(HIP)
  set(CMAKE_HIP_STANDARD 17)
  set(moe_gpu_language HIP)
  set_target_properties(moe_routing PROPERTIES HIP_ARCHITECTURES "${CMAKE_HIP_ARCHITECTURES}")
  target_compile_options(moe_routing PRIVATE $<$<COMPILE_LANGUAGE:HIP>:-fno-fast-math -ffp-contract=off
                         -fno-gpu-flush-denormals-to-zero>)  # IEEE: moe_sum's bits
  find_package(hip CONFIG REQUIRED)
  target_link_libraries(moe_routing PUBLIC hip::host)
  set(MOE_PACKAGE_DEPENDENCIES "find_dependency(hip CONFIG)")
endif()

set_source_files_properties(${MOE_GPU_SOURCES} PROPERTIES LANGUAGE ${moe_gpu_language})
target_sources(moe_routing PRIVATE ${MOE_GPU_SOURCES})
target_include_directories(moe_routing PRIVATE ${moe_gpu_includes})
target_compile_definitions(moe_routing PRIVATE MOE_GPU_HIP=1)

set(MOE_GPU_LANGUAGE ${moe_gpu_language})
set(MOE_GPU_INCLUDES ${moe_gpu_includes})
set(MOE_GPU_DEFINITIONS MOE_GPU_HIP=1)
