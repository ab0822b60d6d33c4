# cmake -DSRC=<python/kiln> -DDST=<overlay>/kiln -DMPI_PLUGIN=<libkiln_mpi.so>
#       -DPYTHON=<interpreter> -DPYTHON_LINK=<overlay>/python -P link_python_overlay.cmake
# Links python/kiln's modules and subpackages into an overlay package that
# holds another CPython's kiln._C (python/CMakeLists.txt, KILN_EXTRA_PYTHONS).
file(MAKE_DIRECTORY ${DST})
file(GLOB entries RELATIVE ${SRC} ${SRC}/*.py ${SRC}/*)
foreach(name IN LISTS entries)
  if(name MATCHES "^(__pycache__|_C\\..*\\.so)$" OR (NOT name MATCHES "\\.py$" AND NOT IS_DIRECTORY ${SRC}/${name}))
    continue()
  endif()
  if(NOT EXISTS ${DST}/${name})
    file(CREATE_LINK ${SRC}/${name} ${DST}/${name} SYMBOLIC)
  endif()
endforeach()
if(NOT EXISTS ${DST}/libkiln_mpi.so)
  file(CREATE_LINK ${MPI_PLUGIN} ${DST}/libkiln_mpi.so SYMBOLIC)
endif()
if(NOT EXISTS ${PYTHON_LINK})
  file(CREATE_LINK ${PYTHON} ${PYTHON_LINK} SYMBOLIC)
endif()
