# `cmake --install`: libhfa.so, the public headers, the `hfa` tool, the license and a package
# config, so that another CMake project writes find_package(hfa) and
# target_link_libraries(app hfa::hfa).
include(CMakePackageConfigHelpers)

set(HFA_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/hfa)

install(TARGETS hfa EXPORT hfaTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY include/hfa DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS hfa_tool RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(TARGET hfa_torch)  # the C++ torch ops, built where torch was found: beside libhfa
  set_target_properties(hfa_torch PROPERTIES INSTALL_RPATH "$ORIGIN")
  install(TARGETS hfa_torch LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()
install(FILES LICENSE README.md CHANGELOG.md DESTINATION ${CMAKE_INSTALL_DOCDIR})

install(EXPORT hfaTargets NAMESPACE hfa:: DESTINATION ${HFA_INSTALL_CMAKEDIR})
configure_package_config_file(cmake/hfaConfig.cmake.in ${PROJECT_BINARY_DIR}/hfaConfig.cmake
                              INSTALL_DESTINATION ${HFA_INSTALL_CMAKEDIR})
# As the SONAME: before 1.0 only the same major.minor is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/hfaConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/hfaConfig.cmake ${PROJECT_BINARY_DIR}/hfaConfigVersion.cmake
        DESTINATION ${HFA_INSTALL_CMAKEDIR})
