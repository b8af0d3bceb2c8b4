# The test `examples.installed` (tests/CMakeLists.txt), run with cmake -P: zeroshard as a user gets
# it. Installs the build tree ZS_BUILD_DIR into a fresh prefix under ZS_WORK_DIR, configures and
# builds ZS_SOURCE_DIR/examples as an outside project against that prefix (find_package(zeroshard),
# nothing from the source or build tree), then runs each example and checks that it exits 0 and
# ends with "loss fell: <first> -> <last>" with last < first.
#
# Inputs (-D): ZS_BUILD_DIR, ZS_SOURCE_DIR, ZS_WORK_DIR, ZS_CXX_COMPILER, ZS_C_COMPILER;
# optional ZS_LAUNCHER (ccache), ZS_CONFIGURE_ARGS (a list passed on to the examples' configure,
# e.g. how MPI or CUDA were found), ZS_JOBS.
foreach(_var ZS_BUILD_DIR ZS_SOURCE_DIR ZS_WORK_DIR ZS_CXX_COMPILER ZS_C_COMPILER)
  if(NOT ${_var})
    message(FATAL_ERROR "TestInstalledExamples: -D${_var}=... is required")
  endif()
endforeach()
if(NOT ZS_JOBS)
  set(ZS_JOBS 2)
endif()

function(zs_run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _out)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${_rc}):\n${_out}")
  endif()
  set(zs_run_output "${_out}" PARENT_SCOPE)
endfunction()

set(_prefix ${ZS_WORK_DIR}/prefix)
set(_build ${ZS_WORK_DIR}/build)
file(REMOVE_RECURSE ${ZS_WORK_DIR})

zs_run("cmake --install" ${CMAKE_COMMAND} --install ${ZS_BUILD_DIR} --prefix ${_prefix})
foreach(_installed bin/zs-train bin/zs-mem bin/zs-ckpt include/zeroshard/comm/communicator.h
                   include/zeroshard/runtime/tensor.h)
  if(NOT EXISTS ${_prefix}/${_installed})
    message(FATAL_ERROR "cmake --install did not install ${_installed} under ${_prefix}")
  endif()
endforeach()
file(GLOB_RECURSE _config ${_prefix}/*/zeroshardConfig.cmake)
if(NOT _config)
  message(FATAL_ERROR "cmake --install did not install zeroshardConfig.cmake under ${_prefix}")
endif()

set(_launcher)
if(ZS_LAUNCHER)
  set(_launcher -DCMAKE_CXX_COMPILER_LAUNCHER=${ZS_LAUNCHER})
endif()
zs_run("configuring examples/ against the installed package"
       ${CMAKE_COMMAND} -S ${ZS_SOURCE_DIR}/examples -B ${_build} -DCMAKE_PREFIX_PATH=${_prefix}
       -DCMAKE_CXX_COMPILER=${ZS_CXX_COMPILER} -DCMAKE_C_COMPILER=${ZS_C_COMPILER} ${_launcher}
       ${ZS_CONFIGURE_ARGS})
zs_run("building examples/" ${CMAKE_COMMAND} --build ${_build} -j${ZS_JOBS})

# Each example with arguments short enough for a test, long enough for the loss to halve.
set(_runs "tiny-gpt|150|2|3" "custom-model|150|2|3" "classifier|--steps|200|--ranks|2|--stage|3")
foreach(_run ${_runs})
  string(REPLACE "|" ";" _args ${_run})
  list(POP_FRONT _args _name)
  set(_program ${_build}/zs-example-${_name})
  string(TIMESTAMP _start "%s")
  execute_process(COMMAND ${_program} ${_args} RESULT_VARIABLE _rc OUTPUT_VARIABLE _out
                  ERROR_VARIABLE _err WORKING_DIRECTORY ${ZS_WORK_DIR})
  string(TIMESTAMP _end "%s")
  math(EXPR _seconds "${_end} - ${_start}")
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "zs-example-${_name} ${_args} exited with ${_rc}:\n${_out}\n${_err}")
  endif()
  string(STRIP "${_out}" _out)
  string(REGEX MATCH "[^\n]*$" _last "${_out}")
  if(NOT _last MATCHES "^loss fell: ([0-9.]+) -> ([0-9.]+)$")
    message(FATAL_ERROR "zs-example-${_name}: the last line is not \"loss fell: A -> B\":\n"
                        "${_out}\n${_err}")
  endif()
  set(_first ${CMAKE_MATCH_1})
  set(_final ${CMAKE_MATCH_2})
  if(NOT _final LESS _first)
    message(FATAL_ERROR "zs-example-${_name}: the loss did not fall (${_first} -> ${_final})")
  endif()
  message(STATUS "zs-example-${_name}: loss ${_first} -> ${_final} (${_seconds} s)")
endforeach()
message(STATUS "installed package: examples built against ${_prefix} and run")
