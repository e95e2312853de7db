# CPU backend: host memory and the reference algorithms. No dependencies.
target_sources(moe_routing PRIVATE ${PROJECT_SOURCE_DIR}/backends/cpu/backend.cpp)
set(MOE_PACKAGE_DEPENDENCIES "")
