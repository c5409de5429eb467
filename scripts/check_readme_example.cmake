# check_readme_example.cmake: the README's C++ example is the code samples/quickstart/main.cc
# compiles and runs (CTest docs_readme_example, label quick), so the example cannot rot: the
# README's first ```cpp block must equal, line for line, the lines of main.cc between its
# "// [readme]" and "// [/readme]" markers with their two-space indent removed.
#
#   cmake -DSOURCE_DIR=<repo> -P check_readme_example.cmake
cmake_minimum_required(VERSION 3.25)

if(NOT DEFINED SOURCE_DIR)
  message(FATAL_ERROR "check_readme_example.cmake: pass -DSOURCE_DIR=...")
endif()

file(READ ${SOURCE_DIR}/README.md readme)
string(FIND "${readme}" "```cpp\n" begin)
if(begin EQUAL -1)
  message(FATAL_ERROR "README.md has no ```cpp block: the example of samples/quickstart/main.cc "
                      "belongs there")
endif()
math(EXPR begin "${begin} + 7")
string(SUBSTRING "${readme}" ${begin} -1 rest)
string(FIND "${rest}" "```" end)
string(SUBSTRING "${rest}" 0 ${end} block)

file(READ ${SOURCE_DIR}/samples/quickstart/main.cc source)
string(FIND "${source}" "  // [readme]\n" begin)
string(FIND "${source}" "  // [/readme]\n" end)
if(begin EQUAL -1 OR end EQUAL -1)
  message(FATAL_ERROR "samples/quickstart/main.cc lacks its // [readme] ... // [/readme] markers")
endif()
math(EXPR begin "${begin} + 14")
math(EXPR length "${end} - ${begin}")
string(SUBSTRING "${source}" ${begin} ${length} code)
# Remove main()'s indent: two spaces at the start of every line. (No "^" in the regex: CMake
# anchors it at every place a search restarts, so it would strip the deeper indents too.)
string(REPLACE "\n  " "\n" code "\n${code}")
string(SUBSTRING "${code}" 1 -1 code)

if(NOT block STREQUAL code)
  file(WRITE ${CMAKE_CURRENT_BINARY_DIR}/readme_example.expected "${code}")
  message(FATAL_ERROR "README.md's ```cpp block differs from samples/quickstart/main.cc between "
                      "its markers; copy the code (without its two-space indent) into the README. "
                      "Expected block: ${CMAKE_CURRENT_BINARY_DIR}/readme_example.expected")
endif()
string(REGEX MATCHALL "\n" lines "${code}")
list(LENGTH lines count)
message(STATUS "README.md's example is samples/quickstart/main.cc's ${count} lines")
