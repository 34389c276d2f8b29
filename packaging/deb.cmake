# The Debian package: `cpack -G DEB` in a configured, built tree (build/release) gives
# rankstat_<version>_<arch>.deb with everything the install rules install under /usr, plus
# /etc/default/rankstatd as a conffile. docs/operations.md "Installing the Debian package" is its guide.
set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_NAME "rankstat")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_VENDOR "rankstat")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "metrics sidecar for LLM serving engines, fed over shared memory")
# The long description, wrapped as the control file wants it.
string(JOIN "\n" CPACK_PACKAGE_DESCRIPTION
  "Engine ranks publish fixed-layout stat records into per-rank lock-free rings in"
  "shared memory; rankstatd drains them, aggregates across ranks with Prometheus"
  "multiprocess semantics and serves /metrics."
  ""
  "This package holds the daemon rankstatd (a systemd service), the operator CLI"
  "rankstat, the client library (C ABI and C++ Reporter, headers, CMake and"
  "pkg-config files) and the Python package rankstat.")
set(CPACK_PACKAGE_CONTACT "rankstat maintainers <maintainers@rankstat.invalid>"
  CACHE STRING "Maintainer field of the Debian package")
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${CPACK_PACKAGE_CONTACT}")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION "net")
set(CPACK_DEBIAN_PACKAGE_PRIORITY "optional")
set(CPACK_DEBIAN_PACKAGE_HOMEPAGE "https://github.com/rankstat/rankstat")
set(CPACK_DEBIAN_COMPRESSION_TYPE "xz")

# Install as `cmake --install --prefix /usr` does, into a staging DESTDIR: the environment file's
# rule (systemd/CMakeLists.txt) puts /etc/default/rankstatd at /etc for the /usr prefix only.
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
set(CPACK_SET_DESTDIR ON)

# Library dependencies from the binaries (dpkg-shlibdeps, package dpkg-dev); the maintainer scripts
# need systemd-sysusers. python3 runs the Python package; the daemon runs without it.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "systemd | systemd-standalone-sysusers | systemd-sysusers")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS "python3")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "prometheus")
# A shlibs file for librankstat.so.0, so packages built against it depend on this one.
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS_POLICY ">=")

# Maintainer scripts: users and segment directory at configure, the service stopped on removal, state
# removed on purge (packaging/deb/*.in). Their paths are the /usr install's.
set(RANKSTAT_DEB_SYSUSERS "/usr/${RANKSTAT_SYSUSERS_DIR}/rankstatd.conf")
set(RANKSTAT_DEB_TMPFILES "/usr/${RANKSTAT_TMPFILES_DIR}/rankstatd.conf")
set(RANKSTAT_DEB_PYTHON_PACKAGE "/usr/${RANKSTAT_INSTALL_PYTHONDIR}/rankstat")
set(_rankstat_deb_control)
foreach(script IN ITEMS postinst prerm postrm)
  configure_file(${CMAKE_CURRENT_SOURCE_DIR}/deb/${script}.in ${CMAKE_CURRENT_BINARY_DIR}/deb/${script} @ONLY
    FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
  list(APPEND _rankstat_deb_control ${CMAKE_CURRENT_BINARY_DIR}/deb/${script})
endforeach()
# The scripts replace CPack's own, which would run ldconfig: the trigger does it.
list(APPEND _rankstat_deb_control ${CMAKE_CURRENT_SOURCE_DIR}/deb/conffiles ${CMAKE_CURRENT_SOURCE_DIR}/deb/triggers)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA "${_rankstat_deb_control}")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

include(CPack)
