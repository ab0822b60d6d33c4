# Installs the public header set: include/kiln/kiln.h and everything it
# includes, transitively, as <kiln/...>. Run by `cmake --install` (see
# install(CODE) in the top-level CMakeLists.txt), which sets
#   KILN_SOURCE_DIR   the source tree
#   KILN_STAGE_DIR    scratch space in the build tree
#   KILN_VERSION_H    the generated kiln/version.h
#   KILN_INCLUDE_DEST where the headers go (absolute; DESTDIR is added by file(INSTALL))
#
# In the source tree the headers include each other by folder,
# `#include "runtime/value/value.h"` (the project root is on the include path).
# Installed, they sit in <prefix>/include/kiln/<folder>/ and the same line
# reads `#include <kiln/runtime/value/value.h>`, so `-I <prefix>/include` is the
# only include path an embedder needs. The rewrite is the only difference
# between the two copies; the set is derived from the includes themselves,
# so a header that starts including another one ships it without any list to
# update. A quoted include that names no file of the tree is an error here
# rather than a broken installed header.
#
# Headers are found by following quoted includes only; <...> includes are
# the embedder's: tests/install checks that they are all the C++ standard
# library's or the C library's (no LLVM, MPI, Python, spdlog, ...).

# Where a source file lands under include/: include/kiln/x.h -> kiln/x.h,
# <folder>/x.h -> kiln/<folder>/x.h.
function(kiln_installed_name rel out)
  if(rel MATCHES "^include/(.*)$")
    set(${out} "${CMAKE_MATCH_1}" PARENT_SCOPE)
  else()
    set(${out} "kiln/${rel}" PARENT_SCOPE)
  endif()
endfunction()

file(REMOVE_RECURSE "${KILN_STAGE_DIR}")
set(queue "include/kiln/kiln.h")
set(seen "")
while(queue)
  list(POP_FRONT queue rel)
  if(rel IN_LIST seen)
    continue()
  endif()
  list(APPEND seen "${rel}")
  file(READ "${KILN_SOURCE_DIR}/${rel}" text)
  get_filename_component(dir "${rel}" DIRECTORY)
  file(STRINGS "${KILN_SOURCE_DIR}/${rel}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*\"[^\"]+\"")
  foreach(line IN LISTS lines)
    string(REGEX REPLACE "^[^\"]*\"([^\"]+)\".*$" "\\1" path "${line}")
    if(EXISTS "${KILN_SOURCE_DIR}/${dir}/${path}" AND NOT IS_DIRECTORY "${KILN_SOURCE_DIR}/${dir}/${path}")
      # Relative to the including file: the installed tree keeps the same
      # relative layout, so the line stays as it is.
      cmake_path(SET target NORMALIZE "${dir}/${path}")
    elseif(EXISTS "${KILN_SOURCE_DIR}/${path}" AND NOT IS_DIRECTORY "${KILN_SOURCE_DIR}/${path}")
      cmake_path(SET target NORMALIZE "${path}")
      kiln_installed_name("${target}" installed)
      string(REPLACE "\"${path}\"" "<${installed}>" new_line "${line}")
      string(REPLACE "${line}" "${new_line}" text "${text}")
    else()
      message(FATAL_ERROR "kiln: public header ${rel} includes \"${path}\", which is no file of "
                          "the source tree: every header <kiln/kiln.h> reaches is installed, so it must be one")
    endif()
    if(target MATCHES "^\\.\\./")
      message(FATAL_ERROR "kiln: public header ${rel} includes ${path}, outside the source tree")
    endif()
    list(APPEND queue "${target}")
  endforeach()
  kiln_installed_name("${rel}" installed)
  file(WRITE "${KILN_STAGE_DIR}/${installed}" "${text}")
endwhile()
file(COPY "${KILN_VERSION_H}" DESTINATION "${KILN_STAGE_DIR}/kiln")

list(LENGTH seen count)
message(STATUS "kiln: ${count} public headers (the closure of include/kiln/kiln.h) and kiln/version.h")
file(INSTALL DESTINATION "${KILN_INCLUDE_DEST}" TYPE DIRECTORY FILES "${KILN_STAGE_DIR}/kiln")
