# PCRE2 (the 8-bit library, UTF + Unicode properties) for the tokenizer's split-regex pre-tokenizer.
# Defines PCRE2_FOUND and the imported target PCRE2::8bit. Looks in CMAKE_PREFIX_PATH and the system.
find_path(PCRE2_INCLUDE_DIR pcre2.h)
find_library(PCRE2_LIBRARY NAMES pcre2-8)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(PCRE2 REQUIRED_VARS PCRE2_LIBRARY PCRE2_INCLUDE_DIR)
if(PCRE2_FOUND AND NOT TARGET PCRE2::8bit)
  add_library(PCRE2::8bit UNKNOWN IMPORTED)
  set_target_properties(PCRE2::8bit PROPERTIES IMPORTED_LOCATION "${PCRE2_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${PCRE2_INCLUDE_DIR}"
                        INTERFACE_COMPILE_DEFINITIONS PCRE2_CODE_UNIT_WIDTH=8)
endif()
mark_as_advanced(PCRE2_INCLUDE_DIR PCRE2_LIBRARY)
