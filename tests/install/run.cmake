# ctest install:consumer — cmake --install into a scratch prefix, then (1) a CMake consumer with find_package(moex),
# (2) the same program through pkg-config when pkg-config is there, (3) the installed `moex generate` run from
# outside the source tree with no --model (it must find its shipped model under <prefix>/share/moex).
# Variables: BUILD_DIR, SOURCE_DIR (tests/install), WORK_DIR, GENERATOR, CXX.
function(step what)
  execute_process(COMMAND ${ARGN} WORKING_DIRECTORY ${WORK_DIR} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  message("== ${what}\n${out}${err}")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${what} failed (${rc})")
  endif()
  set(step_output "${out}${err}" PARENT_SCOPE)
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
step("install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
foreach(f include/moex/model.h bin/moex share/moex/models/moex-tiny-moe/config.json lib/cmake/moex/moexConfig.cmake
          lib/pkgconfig/moex.pc)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "the install has no ${f}")
  endif()
endforeach()

step("configure the consumer" ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/consumer -G ${GENERATOR}
     -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_BUILD_TYPE=Release)
step("build the consumer" ${CMAKE_COMMAND} --build ${WORK_DIR}/consumer)
step("run the consumer" ${WORK_DIR}/consumer/moex_consumer ${prefix}/share/moex/models/moex-tiny-moe)

find_program(PKG_CONFIG pkg-config)
if(PKG_CONFIG)
  set(ENV{PKG_CONFIG_PATH} ${prefix}/lib/pkgconfig)
  step("pkg-config" ${PKG_CONFIG} --cflags --libs moex)
  string(STRIP "${step_output}" flags)
  separate_arguments(flags UNIX_COMMAND "${flags}")
  step("build with pkg-config" ${CXX} -O1 ${SOURCE_DIR}/consumer.cpp -o ${WORK_DIR}/consumer_pc ${flags})
  step("run the pkg-config build" ${WORK_DIR}/consumer_pc ${prefix}/share/moex/models/moex-tiny-moe)
else()
  message("== no pkg-config here: the pkg-config build is skipped")
endif()

unset(ENV{MOEX_DEFAULT_MODEL})
step("installed moex generate" ${prefix}/bin/moex generate --prompt "And God said," --max-new-tokens 8 --seed 3)
if(NOT step_output MATCHES "decode")
  message(FATAL_ERROR "moex generate printed no timings")
endif()
