# Expert parallelism (moe/ep.h): the engine in core/src/ep/, the backend's steps (backends/<name>/ep_*), and the
# transports the build options name. Without either option the API still exists and answers UNSUPPORTED.
#   -DMOE_WITH_MPI=ON   CMake's FindMPI (C++ bindings not needed: the C API of MPI from C++). Any backend; device
#                       buffers (CUDA/HIP) need a GPU-aware MPI at run time. AUTO: on when FindMPI finds MPI (the
#                       default of pip builds, SKBUILD, so that `pip install .` gives moe_routing.ep where MPI is).
#   -DMOE_WITH_NCCL=ON  CUDA backend: nccl.h / libnccl from the CUDA toolkit (or NCCL_ROOT / MOE_NCCL_ROOT).
set(_moe_mpi_default OFF)
if(SKBUILD)
  set(_moe_mpi_default AUTO)
endif()
set(MOE_WITH_MPI ${_moe_mpi_default} CACHE STRING "Expert-parallel dispatch/combine over MPI: ON, OFF or AUTO (on if found)")
if(MOE_WITH_MPI STREQUAL "AUTO")
  find_package(MPI QUIET COMPONENTS C)
  if(MPI_C_FOUND)
    set(MOE_WITH_MPI ON)
  else()
    set(MOE_WITH_MPI OFF)
  endif()
  message(STATUS "moe-routing EP: MOE_WITH_MPI=AUTO -> ${MOE_WITH_MPI}")
endif()
option(MOE_WITH_NCCL "Expert-parallel dispatch/combine over NCCL (CUDA backend)" OFF)

set(moe_ep_sources
  ${PROJECT_SOURCE_DIR}/core/src/ep/engine.cpp
  ${PROJECT_SOURCE_DIR}/core/src/ep/c_api_ep.cpp)
if(MOE_BACKEND STREQUAL "CPU")
  list(APPEND moe_ep_sources ${PROJECT_SOURCE_DIR}/backends/cpu/ep_ops.cpp)
elseif(MOE_BACKEND STREQUAL "KOKKOS")
  list(APPEND moe_ep_sources ${PROJECT_SOURCE_DIR}/backends/kokkos/ep_ops.cpp)
endif()  # CUDA / HIP: backends/cuda_hip/ep_*.cu are in MOE_GPU_SOURCES (MoEGpuSources.cmake)

if(MOE_WITH_MPI)
  find_package(MPI REQUIRED COMPONENTS C)
  list(APPEND moe_ep_sources ${PROJECT_SOURCE_DIR}/core/src/ep/transport_mpi.cpp)
  target_link_libraries(moe_routing PRIVATE MPI::MPI_C)
  # The C API of MPI from C++: keep Open MPI's / MPICH's deprecated C++ bindings out (they need libmpi_cxx).
  set(MOE_MPI_C_ONLY OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)
  target_compile_definitions(moe_routing PRIVATE MOE_WITH_MPI=1 ${MOE_MPI_C_ONLY})
  # FindMPI's C component needs the C language: a Fortran-only or C++-only consumer of a static build gets it here.
  string(APPEND MOE_PACKAGE_DEPENDENCIES "\n" [=[
get_property(_moe_languages GLOBAL PROPERTY ENABLED_LANGUAGES)
if(NOT "C" IN_LIST _moe_languages)
  enable_language(C)
endif()
find_dependency(MPI COMPONENTS C)]=])
  message(STATUS "moe-routing EP: MPI ${MPI_C_VERSION} (${MPIEXEC_EXECUTABLE})")
  # mpiexec flags of the multi-rank tests (tests/ep, python): Open MPI needs --oversubscribe for more ranks than
  # cores, and (as root, e.g. in CI containers) permission to run as root; MPICH needs neither and rejects them.
  set(MOE_MPIEXEC_EXTRA_FLAGS "" CACHE STRING "extra mpiexec flags for the EP tests (Open MPI: detected)")
  set(MOE_MPIEXEC_FLAGS ${MOE_MPIEXEC_EXTRA_FLAGS})
  execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version OUTPUT_VARIABLE _moe_mpiexec_version ERROR_QUIET)
  if(_moe_mpiexec_version MATCHES "Open MPI|OpenRTE" AND NOT MOE_MPIEXEC_EXTRA_FLAGS)
    list(APPEND MOE_MPIEXEC_FLAGS --oversubscribe --allow-run-as-root)
  endif()
endif()

if(MOE_WITH_NCCL)
  if(NOT MOE_BACKEND STREQUAL "CUDA")
    message(FATAL_ERROR "MOE_WITH_NCCL needs MOE_BACKEND=CUDA (RCCL for HIP is not wired yet)")
  endif()
  find_package(CUDAToolkit REQUIRED)
  find_path(MOE_NCCL_INCLUDE_DIR nccl.h
    HINTS ${MOE_NCCL_ROOT} ENV NCCL_ROOT ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}
    PATH_SUFFIXES include)
  find_library(MOE_NCCL_LIBRARY nccl
    HINTS ${MOE_NCCL_ROOT} ENV NCCL_ROOT ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}
    PATH_SUFFIXES lib lib64)
  if(NOT MOE_NCCL_INCLUDE_DIR OR NOT MOE_NCCL_LIBRARY)
    message(FATAL_ERROR "MOE_WITH_NCCL: nccl.h / libnccl not found (set MOE_NCCL_ROOT)")
  endif()
  list(APPEND moe_ep_sources ${PROJECT_SOURCE_DIR}/core/src/ep/transport_nccl.cpp)
  target_include_directories(moe_routing SYSTEM PRIVATE ${MOE_NCCL_INCLUDE_DIR})
  target_link_libraries(moe_routing PUBLIC ${MOE_NCCL_LIBRARY} CUDA::cudart_static)
  target_compile_definitions(moe_routing PRIVATE MOE_WITH_NCCL=1)
  message(STATUS "moe-routing EP: NCCL ${MOE_NCCL_LIBRARY}")
endif()

target_sources(moe_routing PRIVATE ${moe_ep_sources})
# fp32 in a fixed order: no contraction into FMA on hosts that have it (GCC contracts by default even in ISO mode).
set_source_files_properties(${moe_ep_sources} PROPERTIES COMPILE_OPTIONS "-ffp-contract=off")
