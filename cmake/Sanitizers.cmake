# Applies RANKSTAT_SANITIZE to every target of the project (set by the asan-ubsan and tsan presets).
if(RANKSTAT_SANITIZE)
  list(JOIN RANKSTAT_SANITIZE "," _rankstat_san)
  add_compile_options(-fsanitize=${_rankstat_san} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${_rankstat_san})
endif()
