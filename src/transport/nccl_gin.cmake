# nccl_gin (src/transport/nccl_gin.*): built with the CUDA backend when NCCL >= 2.28 with its device
# API (nccl_device.h) is found. Otherwise it compiles out, and constructing NcclGinTransport throws
# Unsupported with the reason printed here. NCCL comes from cmake/FindNCCL.cmake, the lookup the
# bench's NCCL baseline (tools/bench/nccl.cmake) uses too, so that one build links one NCCL: NCCL_ROOT
# (CMake or environment) or NCCL_HOME picks an install, SWITCHYARD_NCCL_INCLUDE_DIR / _LIBRARY (cache)
# pick files by hand, and -DCMAKE_DISABLE_FIND_PACKAGE_NCCL=ON builds without NCCL.
set(SWITCHYARD_NCCL_GIN "AUTO" CACHE STRING "Build the nccl_gin transport: AUTO (when NCCL >= 2.28 with nccl_device.h is found) or OFF")
set_property(CACHE SWITCHYARD_NCCL_GIN PROPERTY STRINGS AUTO OFF)

set(switchyard_nccl_gin_missing "")
if(NOT SWITCHYARD_HAS_CUDA)
  set(switchyard_nccl_gin_missing "the CUDA backend is off")
elseif(SWITCHYARD_NCCL_GIN STREQUAL "OFF")
  set(switchyard_nccl_gin_missing "SWITCHYARD_NCCL_GIN=OFF")
else()
  # The build's one NCCL lookup (cmake/FindNCCL.cmake), shared with tools/bench/nccl.cmake.
  list(APPEND CMAKE_MODULE_PATH ${PROJECT_SOURCE_DIR}/cmake)
  find_package(NCCL QUIET)
  if(CMAKE_DISABLE_FIND_PACKAGE_NCCL)
    set(switchyard_nccl_gin_missing "NCCL disabled (CMAKE_DISABLE_FIND_PACKAGE_NCCL)")
  elseif(NOT NCCL_FOUND)
    set(switchyard_nccl_gin_missing "${NCCL_NOT_FOUND_REASON}")
  elseif(NOT NCCL_HAS_DEVICE_API)
    set(switchyard_nccl_gin_missing "the NCCL ${NCCL_VERSION} at ${NCCL_INCLUDE_DIR} has no device API (nccl_device.h)")
  elseif(NCCL_VERSION VERSION_LESS 2.28)
    set(switchyard_nccl_gin_missing "the NCCL at ${NCCL_INCLUDE_DIR} is ${NCCL_VERSION}, older than 2.28")
  else()
    # NOTES: 2.28 releases differ in the device-communicator fields we set (an early 2.28 on the GPU
    # machine lacked ginForceEnable / ginContextCount / ginSignalCount): test for them.
    include(CheckCXXSourceCompiles)
    # The check's cached verdict belongs to one header: look again when the header changes.
    if(NOT "${SWITCHYARD_NCCL_GIN_CHECKED_HEADER}" STREQUAL "${NCCL_INCLUDE_DIR}")
      unset(SWITCHYARD_NCCL_HAS_GIN_REQUIREMENTS CACHE)
      set(SWITCHYARD_NCCL_GIN_CHECKED_HEADER "${NCCL_INCLUDE_DIR}" CACHE INTERNAL "")
    endif()
    set(CMAKE_REQUIRED_INCLUDES ${NCCL_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS})
    set(CMAKE_REQUIRED_QUIET ON)
    check_cxx_source_compiles([=[
#include <nccl.h>
#include <nccl_device.h>
int main() {
  ncclDevCommRequirements requirements{};
  requirements.ginForceEnable = true;
  requirements.ginContextCount = 1;
  requirements.ginSignalCount = 1;
  ncclDevComm comm{};
  return comm.ginContextCount;
}]=] SWITCHYARD_NCCL_HAS_GIN_REQUIREMENTS)
    unset(CMAKE_REQUIRED_INCLUDES)
    unset(CMAKE_REQUIRED_QUIET)
    if(NOT SWITCHYARD_NCCL_HAS_GIN_REQUIREMENTS)
      set(switchyard_nccl_gin_missing
          "the NCCL ${NCCL_VERSION} at ${NCCL_INCLUDE_DIR} lacks the GIN fields of ncclDevCommRequirements (ginForceEnable, ginContextCount, ginSignalCount)")
    endif()
  endif()
endif()

if(switchyard_nccl_gin_missing STREQUAL "")
  message(STATUS "switchyard: nccl_gin ON (NCCL ${NCCL_VERSION}, ${NCCL_INCLUDE_DIR}, ${NCCL_LIBRARY})")
  target_compile_definitions(switchyard PRIVATE SWITCHYARD_WITH_NCCL_GIN=1)
  # NOTES: switchyard is a static library, so its private libraries go into the installed export.
  # There the imported target (this build's lookup) would be undefined; the library's path stands in.
  target_link_libraries(switchyard PRIVATE $<BUILD_INTERFACE:NCCL::nccl> $<INSTALL_INTERFACE:${NCCL_LIBRARY}>)
  # In-tree tests and tools see the same configuration (nccl_gin.hpp, nccl_gin.cuh).
  target_compile_definitions(switchyard_internal INTERFACE SWITCHYARD_WITH_NCCL_GIN=1)
  target_link_libraries(switchyard_internal INTERFACE NCCL::nccl)
else()
  message(STATUS "switchyard: nccl_gin OFF: ${switchyard_nccl_gin_missing}")
  target_compile_definitions(switchyard PRIVATE "SWITCHYARD_NCCL_GIN_MISSING=\"${switchyard_nccl_gin_missing}\"")
endif()
