# Flags shared by hfa's targets.

# Compile a CUDA target for Hopper: wgmma, setmaxnreg and TMA need sm_90a exactly.
function(hfa_cuda_target target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-gencode=arch=compute_90a,code=sm_90a -O3 --use_fast_math
      -lineinfo --expt-relaxed-constexpr -Xptxas=-v -Xcompiler=-fvisibility=hidden>)
  target_compile_definitions(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:NDEBUG>)
endfunction()

function(hfa_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>)
endfunction()
