# check_doc_paths.cmake: every repository path a document names exists, so a page such as
# docs/architecture.md stays true as files move (CTest docs_architecture_paths).
#
#   cmake -DSOURCE_DIR=<repo> -DDOC=<path relative to the repo> -P check_doc_paths.cmake
#
# A path is a word (in prose, in `backticks` or in a code block) that starts with one of the
# repository's top-level folders: src/, include/, tests/, docs/, scripts/, cmake/, samples/,
# benchmarks/. It ends at the first character a path here never holds (space, backtick, comma,
# parenthesis, '<', '*', ...), and a trailing '.' or ':' is punctuation, so `src/<component>/`
# checks src/ and a pattern like `*_isa.cc` is not a path.
cmake_minimum_required(VERSION 3.25)

foreach(var SOURCE_DIR DOC)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "check_doc_paths.cmake: pass -D${var}=...")
  endif()
endforeach()

file(READ ${SOURCE_DIR}/${DOC} text)
set(prefix "(src|include|tests|docs|scripts|cmake|samples|benchmarks)/")
string(REGEX MATCHALL "(^|[ `(\n])${prefix}[A-Za-z0-9_./-]*" words "${text}")
set(paths)
foreach(word IN LISTS words)
  string(REGEX REPLACE "^[ `(\n]" "" path "${word}")
  string(REGEX REPLACE "[.:]+$" "" path "${path}")
  list(APPEND paths ${path})
endforeach()
list(REMOVE_DUPLICATES paths)
list(LENGTH paths checked)
set(missing)
foreach(path IN LISTS paths)
  if(NOT EXISTS ${SOURCE_DIR}/${path})
    list(APPEND missing ${path})
  endif()
endforeach()

if(missing)
  list(JOIN missing "\n  " text)
  message(FATAL_ERROR "${DOC} names paths that do not exist:\n  ${text}\nupdate the page to \
where the code is now")
endif()
if(checked EQUAL 0)
  message(FATAL_ERROR "${DOC} names no repository path: the check checks nothing")
endif()
message(STATUS "${DOC}: the ${checked} repository paths it names exist")
