# moe_target_warnings(target): the project's warning set, errors when MOE_WARNINGS_AS_ERRORS is on.
# Also forbids fast-math style flags from leaking in: moe_sum's bit-exactness depends on IEEE arithmetic; and
# FMA contraction, which GCC applies across statements in C++ by default (-std=c++17 too: its ISO-mode "off"
# is for C only) wherever the target has FMA (aarch64, x86 with -march=haswell+): moe_combine's w * x + acc,
# moe_topk_gating's exp (numeric_exp.hpp).
function(moe_target_warnings target)
  set(cxx_flags -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion)
  if(MOE_WARNINGS_AS_ERRORS)
    list(APPEND cxx_flags -Werror)
  endif()
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:${cxx_flags} -fno-fast-math -ffp-contract=off>
    $<$<COMPILE_LANGUAGE:C>:-Wall -Wextra -Wpedantic $<$<BOOL:${MOE_WARNINGS_AS_ERRORS}>:-Werror>>
    $<$<COMPILE_LANGUAGE:HIP>:-Wall -Wextra $<$<BOOL:${MOE_WARNINGS_AS_ERRORS}>:-Werror>>)
  if(CMAKE_CUDA_COMPILER)
    target_compile_options(${target} PRIVATE
      $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra $<$<BOOL:${MOE_WARNINGS_AS_ERRORS}>:-Werror=all-warnings -Xcompiler=-Werror>>)
  endif()
endfunction()
