# Flags shared by hfa's targets.

# ptxas's register and spill report for every kernel: what tuning a kernel needs, and thousands of
# lines of build output otherwise.
option(HFA_PTXAS_VERBOSE "Print ptxas's register/spill report for each kernel (-Xptxas=-v)" OFF)

# The sm90 ALiBi kernels (src/sm90/README.md): built and checked here (SASS of the other kernels
# unchanged), not yet run on a GPU, so off by default: without them the sm90 backend refuses
# alibi_slopes by name and the CPU backend runs it. ON adds 20 translation units (about +17 % of
# libhfa's build). The default turns ON once their GPU tests pass on the H200.
option(HFA_SM90_ALIBI "Compile the sm90 ALiBi kernels (not yet verified on a GPU)" OFF)
if(HFA_SM90_ALIBI)
  add_compile_definitions(HFA_SM90_ALIBI=1)
endif()

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
