# Labels of the discovered gtest cases (included by CTest after the discovery files, which set the two lists):
# cuda when the name says so (the test needs a device and skips itself without one), else cpu; model and ep by area.
foreach(moex_test IN LISTS moex_gtests)
  if(moex_test MATCHES "[Cc]uda")
    set(moex_labels cuda)
  else()
    set(moex_labels cpu)
  endif()
  if(moex_test MATCHES "^([A-Za-z]+/)?(Model|ExpertsImplementation|Tokenizer)")
    list(APPEND moex_labels model)
  endif()
  if(moex_test MATCHES "^([A-Za-z]+/)?Ep")
    list(APPEND moex_labels ep)
  endif()
  set_tests_properties("${moex_test}" PROPERTIES LABELS "${moex_labels}")
endforeach()
foreach(moex_test IN LISTS moex_portable_gtests)  # the second registration, MOEX_GEMM=portable
  set_tests_properties("${moex_test}" PROPERTIES LABELS "cuda;portable")
endforeach()
# The forced CPU kernel tables (MOEX_CPU_KERNELS).
foreach(moex_test IN LISTS moex_amx_gtests moex_avx512_gtests moex_avx512_bf16_gtests moex_avx2_gtests
                           moex_scalar_gtests moex_pinned_gtests)
  set_tests_properties("${moex_test}" PROPERTIES LABELS "cpu")
endforeach()
# Without AMX the amx: tests skip as a whole (the environment of tests/test_cpu_kernels.cpp): CTest says so.
foreach(moex_test IN LISTS moex_amx_gtests)
  set_tests_properties("${moex_test}" PROPERTIES SKIP_REGULAR_EXPRESSION
                       "\\[  SKIPPED \\];MOEX_CPU_KERNELS=amx: no AMX here")
endforeach()
