# check_doc_paths.cmake: every repository path a document names exists, so a page such as
# docs/architecture.md stays true as files move (CTests docs_architecture_paths, and docs_paths
# over the README, CONTRIBUTING.md and every page of docs/).
#
#   cmake -DSOURCE_DIR=<repo> -DDOC=<path relative to the repo> -P check_doc_paths.cmake
#   cmake -DSOURCE_DIR=<repo> "-DDOC=README.md;docs/*.md" -P check_doc_paths.cmake
#
# DOC is a list of files or globs. One document must name a path (else the check checks
# nothing); of several, only all together must.
# A path is a word (in prose, in `backticks` or in a code block) that starts with one of the
# repository's top-level folders: src/, include/, tests/, docs/, scripts/, cmake/, samples/,
# benchmarks/. It ends at the first character a path here never holds (space, backtick, comma,
# parenthesis, '<', '*', ...), and a trailing '.' or ':' is punctuation, so `src/<component>/`
# checks src/ and a pattern like `*_isa.cc` is not a path. A program built from a source of the
# same name counts as existing (benchmarks/gemm_bench: benchmarks/gemm_bench.cc), and
# "samples/s" is a unit, not a path.
cmake_minimum_required(VERSION 3.25)

foreach(var SOURCE_DIR DOC)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_doc_paths.cmake: pass -D${var}=...")
  endif()
endforeach()

get_filename_component(SOURCE_DIR "${SOURCE_DIR}" ABSOLUTE)
set(docs)
foreach(pattern IN LISTS DOC)
  file(GLOB matched RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/${pattern})
  if(NOT matched)
    message(FATAL_ERROR "check_doc_paths.cmake: no document matches ${pattern}")
  endif()
  list(APPEND docs ${matched})
endforeach()
list(LENGTH docs doc_count)

set(prefix "(src|include|tests|docs|scripts|cmake|samples|benchmarks)/")
set(failures)
set(total 0)
foreach(doc IN LISTS docs)
  file(READ ${SOURCE_DIR}/${doc} text)
  string(REGEX MATCHALL "(^|[ `(\n])${prefix}[A-Za-z0-9_./-]*" words "${text}")
  set(paths)
  foreach(word IN LISTS words)
    string(REGEX REPLACE "^[ `(\n]" "" path "${word}")
    string(REGEX REPLACE "[.:]+$" "" path "${path}")
    if(NOT path STREQUAL "samples/s")
      list(APPEND paths ${path})
    endif()
  endforeach()
  list(REMOVE_DUPLICATES paths)
  list(LENGTH paths checked)
  math(EXPR total "${total} + ${checked}")
  set(missing)
  foreach(path IN LISTS paths)
    if(NOT EXISTS ${SOURCE_DIR}/${path} AND NOT EXISTS ${SOURCE_DIR}/${path}.cc)
      list(APPEND missing ${path})
    endif()
  endforeach()
  if(missing)
    list(JOIN missing "\n  " list)
    string(APPEND failures "${doc} names paths that do not exist:\n  ${list}\n")
  endif()
  if(checked EQUAL 0 AND doc_count EQUAL 1)
    message(FATAL_ERROR "${doc} names no repository path: the check checks nothing")
  endif()
endforeach()

if(failures)
  message(FATAL_ERROR "${failures}update the page to where the code is now")
endif()
if(total EQUAL 0)
  message(FATAL_ERROR "${DOC} name no repository path: the check checks nothing")
endif()
if(doc_count EQUAL 1)
  message(STATUS "${docs}: the ${total} repository paths it names exist")
else()
  message(STATUS "${doc_count} documents: the ${total} repository paths they name exist")
endif()
