# Compiler cache. CI and a developer rebuild the same sources in four presets, often in a fresh clone:
# ccache turns every unchanged translation unit into a cache hit. The base directory is this source
# tree, so a clone at another path hits the same entries (paths under it are hashed relative to it);
# without ccache, or with RANKSTAT_CCACHE=OFF, nothing changes.
option(RANKSTAT_CCACHE "Compile through ccache when it is installed" ON)
if(RANKSTAT_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  find_program(RANKSTAT_CCACHE_PROGRAM ccache)
  if(RANKSTAT_CCACHE_PROGRAM)
    set(launcher ${CMAKE_COMMAND} -E env CCACHE_BASEDIR=${CMAKE_SOURCE_DIR} CCACHE_NOHASHDIR=true
                 ${RANKSTAT_CCACHE_PROGRAM})
    set(CMAKE_C_COMPILER_LAUNCHER ${launcher})
    set(CMAKE_CXX_COMPILER_LAUNCHER ${launcher})
  endif()
endif()
