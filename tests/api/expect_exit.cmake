# Runs TOOL with the space-separated ARGS and fails unless it exits with EXPECT (and, when given,
# prints MATCH on stdout or stderr). ctest's WILL_FAIL cannot tell exit code 2 from a crash.
separate_arguments(arguments UNIX_COMMAND "${ARGS}")
execute_process(COMMAND ${TOOL} ${arguments} RESULT_VARIABLE code OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
message("${out}${err}")
if(NOT code STREQUAL "${EXPECT}")
  message(FATAL_ERROR "expected exit code ${EXPECT}, got ${code}")
endif()
if(DEFINED MATCH AND NOT "${out}${err}" MATCHES "${MATCH}")
  message(FATAL_ERROR "output does not match '${MATCH}'")
endif()
