# Kokkos backend: backends/kokkos/, on Kokkos' default execution space. Kokkos_ROOT picks an install:
# Debian's Kokkos 3.4 (Serial) by default, or a Kokkos 4.x built for OpenMP or CUDA. For Kokkos-CUDA, build
# this project with the same compiler wrapper as Kokkos (CMAKE_CXX_COMPILER=<kokkos>/bin/nvcc_wrapper).
find_package(Kokkos REQUIRED)
message(STATUS "Kokkos ${Kokkos_VERSION}: devices ${Kokkos_DEVICES}")
get_target_property(moe_kokkos_includes Kokkos::kokkos INTERFACE_INCLUDE_DIRECTORIES)
foreach(dir IN LISTS moe_kokkos_includes)
  if(NOT dir MATCHES "^\\$<" AND NOT EXISTS "${dir}" AND Kokkos_INCLUDE_DIRS)
    # Debian's Trilinos-built Kokkos 3.4 exports a non-existent include dir (/usr/lib/include); its
    # Kokkos_INCLUDE_DIRS is right.
    get_filename_component(moe_kokkos_inc "${Kokkos_INCLUDE_DIRS}" ABSOLUTE)
    set_target_properties(Kokkos::kokkos PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${moe_kokkos_inc}")
    set(MOE_KOKKOS_FIX_INCLUDES "${moe_kokkos_inc}")
    break()
  endif()
endforeach()
set(MOE_PACKAGE_DEPENDENCIES "find_dependency(Kokkos)")
if(MOE_KOKKOS_FIX_INCLUDES)  # consumers of the installed package need the same repair
  string(APPEND MOE_PACKAGE_DEPENDENCIES "\nset_target_properties(Kokkos::kokkos PROPERTIES INTERFACE_INCLUDE_DIRECTORIES \"${MOE_KOKKOS_FIX_INCLUDES}\")")
endif()
target_sources(moe_routing PRIVATE
  ${PROJECT_SOURCE_DIR}/backends/kokkos/runtime.cpp
  ${PROJECT_SOURCE_DIR}/backends/kokkos/align.cpp
  ${PROJECT_SOURCE_DIR}/backends/kokkos/align_ep.cpp
  ${PROJECT_SOURCE_DIR}/backends/kokkos/sum.cpp
  ${PROJECT_SOURCE_DIR}/backends/kokkos/permute.cpp
  ${PROJECT_SOURCE_DIR}/backends/kokkos/combine.cpp
  ${PROJECT_SOURCE_DIR}/backends/kokkos/topk_gating.cpp)

target_include_directories(moe_routing PRIVATE ${PROJECT_SOURCE_DIR}/backends/kokkos)
target_link_libraries(moe_routing PUBLIC Kokkos::kokkos)
