# check_public_headers.cmake: the CTest test public_headers_self_contained (tests/CMakeLists.txt).
#
#   cmake -DSOURCE_DIR=<repo> -DBINARY_DIR=<build> -DTARGET=<object library> -P check_public_headers.cmake
#
# 1. Every installed header (include/recsdk/*.h, and version.h generated from version.h.in)
#    includes only what an installed copy can find: another installed recsdk header
#    ("recsdk/x.h" with include/recsdk/x.h present), a header of a public dependency that
#    recsdkConfig.cmake finds for the user ("absl/..."), or a standard library header (<vector>).
#    "src/...", a relative path, or a vendor header (<mpi.h>, <cuda_runtime.h>) fails, naming
#    the header, the line and the fix.
# 2. Every installed header compiles alone, in its own translation unit, with only the installed
#    include directories on the path (TARGET: one .cc per header, tests/CMakeLists.txt). The
#    build compiles them; this rebuilds TARGET, so a header edited since the build is compiled
#    again here.
cmake_minimum_required(VERSION 3.25)

foreach(var SOURCE_DIR BINARY_DIR TARGET)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_public_headers.cmake: pass -D${var}=...")
  endif()
endforeach()

# Public dependencies whose headers an installed header may include (find_dependency in
# cmake/recsdkConfig.cmake). STYLE.md: no vendor (CUDA, CANN, MPI) header in a public header.
set(allowed_dependency_prefixes "absl/")

file(GLOB headers RELATIVE ${SOURCE_DIR}/include/recsdk ${SOURCE_DIR}/include/recsdk/*.h
     ${SOURCE_DIR}/include/recsdk/*.h.in)
set(installed)
foreach(h IN LISTS headers)
  string(REGEX REPLACE "\\.in$" "" h ${h})
  list(APPEND installed ${h})
endforeach()

set(errors)
foreach(h IN LISTS headers)
  file(STRINGS ${SOURCE_DIR}/include/recsdk/${h} lines)
  set(line_number 0)
  foreach(line IN LISTS lines)
    math(EXPR line_number "${line_number} + 1")
    if(line MATCHES "^[ \t]*#[ \t]*include[ \t]*\"([^\"]+)\"")
      set(name ${CMAKE_MATCH_1})
      if(name MATCHES "^recsdk/(.+)$")
        if(NOT CMAKE_MATCH_1 IN_LIST installed)
          list(APPEND errors "include/recsdk/${h}:${line_number}: includes \"${name}\", which is \
not an installed header; include/recsdk/ holds the installed ones")
        endif()
        continue()
      endif()
      set(allowed FALSE)
      foreach(prefix IN LISTS allowed_dependency_prefixes)
        string(FIND "${name}" "${prefix}" at)
        if(at EQUAL 0)
          set(allowed TRUE)
        endif()
      endforeach()
      if(NOT allowed)
        list(APPEND errors "include/recsdk/${h}:${line_number}: includes \"${name}\", which is \
not installed; forward-declare what the header names, or move the declaration behind a pimpl")
      endif()
    elseif(line MATCHES "^[ \t]*#[ \t]*include[ \t]*<([^>]+)>")
      # Standard library headers have no extension and no directory (<vector>, <cstdint>).
      if(CMAKE_MATCH_1 MATCHES "[./]")
        list(APPEND errors "include/recsdk/${h}:${line_number}: includes <${CMAKE_MATCH_1}>, \
which is neither a standard library header nor a public dependency's; keep it in src/")
      endif()
    endif()
  endforeach()
endforeach()

if(errors)
  list(JOIN errors "\n" text)
  message(FATAL_ERROR "installed headers include headers that are not installed:\n${text}")
endif()
list(LENGTH installed count)
message(STATUS "${count} installed headers include only installed headers, absl and the standard library")

execute_process(COMMAND ${CMAKE_COMMAND} --build ${BINARY_DIR} --target ${TARGET}
                RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "an installed header does not compile on its own (target ${TARGET}, above): \
include what it uses, or forward-declare it")
endif()
message(STATUS "each installed header compiles alone in its own translation unit")
