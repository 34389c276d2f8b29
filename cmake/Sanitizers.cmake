# Applies RANKSTAT_SANITIZE to every target of the project (set by the asan-ubsan and tsan presets).
if(RANKSTAT_SANITIZE)
  list(JOIN RANKSTAT_SANITIZE "," _rankstat_san)
  add_compile_options(-fsanitize=${_rankstat_san} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${_rankstat_san})
  if("thread" IN_LIST RANKSTAT_SANITIZE)
    # gcc 12 warns that TSan cannot model std::atomic_thread_fence; Boost.Asio uses fences internally.
    # Our own shared-memory code uses no fences (acquire/release operations only), so silence it.
    add_compile_options(-Wno-tsan)
  endif()
endif()
