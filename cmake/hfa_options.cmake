# Flags shared by hfa's targets.

# ptxas's register and spill report for every kernel: what tuning a kernel needs, and thousands of
# lines of build output otherwise.
option(HFA_PTXAS_VERBOSE "Print ptxas's register/spill report for each kernel (-Xptxas=-v)" OFF)

# Compile a CUDA target for Hopper: wgmma, setmaxnreg and TMA need sm_90a exactly.
function(hfa_cuda_target target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-gencode=arch=compute_90a,code=sm_90a -O3 --use_fast_math
      -lineinfo --expt-relaxed-constexpr -Xcompiler=-fvisibility=hidden>)
  if(HFA_PTXAS_VERBOSE)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xptxas=-v>)
  endif()
  target_compile_definitions(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:NDEBUG>)
endfunction()

function(hfa_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
endfunction()
