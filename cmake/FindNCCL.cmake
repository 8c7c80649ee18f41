# NCCL for the expert-parallel transport: NCCL_ROOT (a prefix with include/nccl.h and lib/libnccl.so[.2]), the CUDA
# toolkit's folders, then the system. The versioned name covers the nvidia-nccl Python wheel, which ships only
# libnccl.so.2 (pass its folder as NCCL_ROOT). Defines NCCL_FOUND and the imported target NCCL::nccl.
set(_moex_nccl_hints ${NCCL_ROOT} $ENV{NCCL_ROOT} $ENV{NCCL_HOME} ${CUDAToolkit_LIBRARY_ROOT})
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_moex_nccl_hints} ${CUDAToolkit_INCLUDE_DIRS} PATH_SUFFIXES include)
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${_moex_nccl_hints} PATH_SUFFIXES lib lib64 lib/x86_64-linux-gnu)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR)
if(NCCL_FOUND AND NOT TARGET NCCL::nccl)
  add_library(NCCL::nccl UNKNOWN IMPORTED)
  set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)
