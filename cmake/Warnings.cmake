# rankstat_warnings(<target>): the project's warning set; errors when RANKSTAT_WERROR is on.
function(rankstat_warnings target)
  target_compile_options(${target} PRIVATE
    -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wsign-conversion -Wold-style-cast
    -Wnon-virtual-dtor -Woverloaded-virtual -Wdouble-promotion
    -Wformat=2 -Wimplicit-fallthrough)
  if(RANKSTAT_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()
