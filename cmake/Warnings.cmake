# rankstat_warnings(<target>): the project's warning set; errors when RANKSTAT_WERROR is on.
function(rankstat_warnings target)
  target_compile_options(${target} PRIVATE
    -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion -Wold-style-cast
    -Wnon-virtual-dtor -Woverloaded-virtual -Wdouble-promotion
    -Wformat=2 -Wimplicit-fallthrough)
  # GCC 12 at -O3 (the release preset) reports -Wrestrict on std::string concatenation inside libstdc++
  # (GCC bugzilla 105329 and its duplicates): a false positive inside the standard library, not our code.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    target_compile_options(${target} PRIVATE -Wno-restrict)
  endif()
  if(RANKSTAT_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
