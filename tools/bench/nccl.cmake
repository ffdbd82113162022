# The bench's nccl baseline engine needs NCCL (nccl.h and libnccl), from cmake/FindNCCL.cmake: the
# lookup the nccl_gin transport uses too, so that one build has one NCCL (NCCL_ROOT / NCCL_HOME, the
# nvidia-nccl wheel of the python3 on PATH, the CUDA toolkit, /usr; header and library of one
# install). Without it the engine is compiled out and the bench reports it as skipped,
# SWITCHYARD_BENCH_NCCL_NOTE saying why.
set(SWITCHYARD_BENCH_NCCL "AUTO" CACHE STRING "Build the bench's NCCL baseline engine: ON, OFF or AUTO (when NCCL is found)")
set_property(CACHE SWITCHYARD_BENCH_NCCL PROPERTY STRINGS AUTO ON OFF)

set(SWITCHYARD_BENCH_HAS_NCCL OFF)
if(NOT SWITCHYARD_HAS_CUDA)
  set(SWITCHYARD_BENCH_NCCL_NOTE "not built: switchyard-bench was built without the CUDA backend")
  if(SWITCHYARD_BENCH_NCCL STREQUAL "ON")
    message(FATAL_ERROR "SWITCHYARD_BENCH_NCCL=ON needs the CUDA backend (SWITCHYARD_CUDA)")
  endif()
elseif(NOT SWITCHYARD_BENCH_NCCL)
  set(SWITCHYARD_BENCH_NCCL_NOTE "not built: configured with -DSWITCHYARD_BENCH_NCCL=OFF")
elseif(CMAKE_DISABLE_FIND_PACKAGE_NCCL)
  set(SWITCHYARD_BENCH_NCCL_NOTE "not built: configured with -DCMAKE_DISABLE_FIND_PACKAGE_NCCL=ON")
  if(SWITCHYARD_BENCH_NCCL STREQUAL "ON")
    message(FATAL_ERROR "SWITCHYARD_BENCH_NCCL=ON contradicts CMAKE_DISABLE_FIND_PACKAGE_NCCL=ON")
  endif()
else()
  # The build's one NCCL lookup (cmake/FindNCCL.cmake), shared with the nccl_gin transport.
  list(APPEND CMAKE_MODULE_PATH ${PROJECT_SOURCE_DIR}/cmake)
  find_package(NCCL QUIET)
  if(NCCL_FOUND)
    set(SWITCHYARD_BENCH_HAS_NCCL ON)
    get_property(nccl_pairing GLOBAL PROPERTY SWITCHYARD_NCCL_PAIRING)
    set(SWITCHYARD_BENCH_NCCL_NOTE
        "built with NCCL ${NCCL_VERSION} headers (${NCCL_INCLUDE_DIR}), ${NCCL_LIBRARY}; ${nccl_pairing}")
  elseif(SWITCHYARD_BENCH_NCCL STREQUAL "ON")
    message(FATAL_ERROR "SWITCHYARD_BENCH_NCCL=ON but ${NCCL_NOT_FOUND_REASON}")
  else()
    set(SWITCHYARD_BENCH_NCCL_NOTE "not built: ${NCCL_NOT_FOUND_REASON}")
  endif()
endif()
message(STATUS "switchyard-bench: NCCL baseline ${SWITCHYARD_BENCH_HAS_NCCL} (${SWITCHYARD_BENCH_NCCL_NOTE})")

if(SWITCHYARD_BENCH_HAS_NCCL)
  set(SWITCHYARD_BENCH_WITH_NCCL_VALUE 1)
else()
  set(SWITCHYARD_BENCH_WITH_NCCL_VALUE 0)
endif()
configure_file(${CMAKE_CURRENT_LIST_DIR}/nccl_build.hpp.in ${CMAKE_CURRENT_BINARY_DIR}/generated/nccl_build.hpp @ONLY)
