# The install rules of zeroshard (included once by the top-level CMakeLists.txt, after every module
# is added): the libraries, the public headers, the apps and the CMake package `zeroshard`
# (find_package(zeroshard) + zeroshard::zeroshard). Layout, under CMAKE_INSTALL_PREFIX:
#
#   lib/libzs_<module>.a                 every zs_* library target of the module folders
#   include/zeroshard/<module>/...       the headers, by their path in the repository; the
#                                        targets' include directory is include/zeroshard, so
#                                        #include "comm/communicator.h" works unchanged
#   bin/zs-train, zs-mem, zs-ckpt        the apps
#   lib/cmake/zeroshard/                 zeroshardConfig.cmake, its version file and the targets
#
# Generic on purpose: every library target defined in a module folder (zs_module() records the
# folders) or its subfolders is installed and exported — backend libraries such as
# zs_runtime_cuda, zs_ops_cuda or zs_comm_nccl included, whatever their CMakeLists look like — so
# a new module or backend needs no change here. The interface targets that the libraries link
# (zs_arch, zs_warnings, zs_cuda) are exported too: a static library's private links appear in
# its exported link interface.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(ZS_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/zeroshard CACHE STRING
    "Where the zeroshard CMake package is installed (relative to the prefix)")
set(ZS_INSTALL_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR}/zeroshard)

# The targets of `dir` and of every folder below it.
function(zs_targets_below dir out)
  get_property(_targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(_subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(_sub ${_subdirs})
    zs_targets_below(${_sub} _below)
    list(APPEND _targets ${_below})
  endforeach()
  set(${out} ${_targets} PARENT_SCOPE)
endfunction()

get_property(_zs_module_dirs GLOBAL PROPERTY ZS_MODULE_DIRS)
list(REMOVE_DUPLICATES _zs_module_dirs)
set(_zs_libraries zeroshard)
foreach(_target zs_arch zs_warnings zs_cuda)
  if(TARGET ${_target})
    list(APPEND _zs_libraries ${_target})
  endif()
endforeach()
foreach(_dir ${_zs_module_dirs})
  zs_targets_below(${_dir} _targets)
  foreach(_target ${_targets})
    get_target_property(_type ${_target} TYPE)
    if(_type MATCHES "^(STATIC|SHARED|MODULE|OBJECT|INTERFACE)_LIBRARY$")
      list(APPEND _zs_libraries ${_target})
    endif()
  endforeach()
  # Headers keep their path from the repository root (the modules' own include convention).
  file(RELATIVE_PATH _rel ${PROJECT_SOURCE_DIR} ${_dir})
  install(DIRECTORY ${_dir}/ DESTINATION ${ZS_INSTALL_INCLUDEDIR}/${_rel}
          FILES_MATCHING PATTERN "*.h" PATTERN "*.cuh")
endforeach()
list(REMOVE_DUPLICATES _zs_libraries)

install(TARGETS ${_zs_libraries} EXPORT zeroshardTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        OBJECTS DESTINATION ${CMAKE_INSTALL_LIBDIR}/zeroshard-objects
        INCLUDES DESTINATION ${ZS_INSTALL_INCLUDEDIR})

# The apps: every executable of apps/.
zs_targets_below(${PROJECT_SOURCE_DIR}/apps _zs_apps)
foreach(_target ${_zs_apps})
  get_target_property(_type ${_target} TYPE)
  if(_type STREQUAL "EXECUTABLE")
    install(TARGETS ${_target} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
endforeach()

install(EXPORT zeroshardTargets NAMESPACE zeroshard:: DESTINATION ${ZS_INSTALL_CMAKEDIR})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/zeroshardConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/zeroshardConfig.cmake
                              INSTALL_DESTINATION ${ZS_INSTALL_CMAKEDIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/zeroshardConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/zeroshardConfig.cmake
              ${PROJECT_BINARY_DIR}/zeroshardConfigVersion.cmake
        DESTINATION ${ZS_INSTALL_CMAKEDIR})
