# Install rules: the public headers, the libraries (moex and, with CUDA, moex_cuda), the `moex` program, the shipped
# model, a CMake package (find_package(moex) -> moex::moex) and a pkg-config file (moex.pc): component `dev`
# (the Python wheel installs component `python` only).
include(CMakePackageConfigHelpers)
set(MOEX_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/moex)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/moex DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev)
set(moex_install_targets moex)
if(MOEX_CUDA)
  list(APPEND moex_install_targets moex_cuda)
endif()
install(TARGETS ${moex_install_targets} EXPORT moexTargets ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev)
install(TARGETS moex_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT dev)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/models/moex-tiny-moe DESTINATION ${CMAKE_INSTALL_DATADIR}/moex/models
        COMPONENT dev)
install(EXPORT moexTargets NAMESPACE moex:: DESTINATION ${MOEX_CMAKE_DIR} COMPONENT dev)

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/moexConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/moexConfig.cmake INSTALL_DESTINATION ${MOEX_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/moexConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/moexConfig.cmake ${PROJECT_BINARY_DIR}/moexConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/FindPCRE2.cmake ${PROJECT_SOURCE_DIR}/cmake/Findutf8proc.cmake
              ${PROJECT_SOURCE_DIR}/cmake/FindNCCL.cmake
        DESTINATION ${MOEX_CMAKE_DIR} COMPONENT dev)

# pkg-config: static libraries, so Libs lists what they need in link order.
set(MOEX_PC_LIBS "-lmoex")
set(MOEX_PC_LIBS_DIRS "")
if(MOEX_CUDA)
  string(APPEND MOEX_PC_LIBS " -lmoex_cuda -lcublas -lcublasLt -lcudart")
  set(MOEX_PC_LIBS_DIRS " -L${CUDAToolkit_LIBRARY_DIR}")
endif()
if(MOEX_HAVE_NCCL)
  string(APPEND MOEX_PC_LIBS " ${NCCL_LIBRARY}")
endif()
foreach(lib ${PCRE2_LIBRARY} ${UTF8PROC_LIBRARY})
  get_filename_component(dir ${lib} DIRECTORY)
  string(APPEND MOEX_PC_LIBS_DIRS " -L${dir}")
endforeach()
string(APPEND MOEX_PC_LIBS " -lpcre2-8 -lutf8proc -lpthread -ldl")
file(RELATIVE_PATH MOEX_PC_PREFIX_FROM_PC ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
configure_file(${PROJECT_SOURCE_DIR}/cmake/moex.pc.in ${PROJECT_BINARY_DIR}/moex.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/moex.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)
