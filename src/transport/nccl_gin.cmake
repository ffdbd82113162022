# nccl_gin (src/transport/nccl_gin.*): built with the CUDA backend when NCCL >= 2.28 with its device
# API (nccl_device.h) is found. Otherwise it compiles out, and constructing NcclGinTransport throws
# Unsupported with the reason printed here. NCCL_ROOT (CMake or environment) or NCCL_HOME points at
# another NCCL. NOTES: the cache variables SWITCHYARD_NCCL_INCLUDE_DIR / _LIBRARY are the ones the
# bench's NCCL baseline (tools/bench/nccl.cmake) reads too, so that one build links one NCCL.
set(SWITCHYARD_NCCL_GIN "AUTO" CACHE STRING "Build the nccl_gin transport: AUTO (when NCCL >= 2.28 with nccl_device.h is found) or OFF")
set_property(CACHE SWITCHYARD_NCCL_GIN PROPERTY STRINGS AUTO OFF)

set(switchyard_nccl_gin_missing "")
if(NOT SWITCHYARD_HAS_CUDA)
  set(switchyard_nccl_gin_missing "the CUDA backend is off")
elseif(SWITCHYARD_NCCL_GIN STREQUAL "OFF")
  set(switchyard_nccl_gin_missing "SWITCHYARD_NCCL_GIN=OFF")
else()
  # The places tools/bench/nccl.cmake looks too: NCCL_ROOT / NCCL_HOME, the CUDA toolkit, and the
  # nvidia-nccl wheel of the python3 on PATH (the GPU machine's NCCL comes with torch).
  get_filename_component(switchyard_cuda_root "${CUDAToolkit_BIN_DIR}" DIRECTORY)
  set(switchyard_nccl_roots ${NCCL_ROOT} $ENV{NCCL_ROOT} $ENV{NCCL_HOME})
  find_program(SWITCHYARD_PYTHON3 NAMES python3)
  if(SWITCHYARD_PYTHON3)
    execute_process(COMMAND "${SWITCHYARD_PYTHON3}" -c "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])"
                    OUTPUT_VARIABLE switchyard_nccl_wheel OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
                    RESULT_VARIABLE switchyard_nccl_wheel_status)
    if(switchyard_nccl_wheel_status EQUAL 0 AND switchyard_nccl_wheel)
      list(APPEND switchyard_nccl_roots "${switchyard_nccl_wheel}")
    endif()
  endif()
  find_path(SWITCHYARD_NCCL_INCLUDE_DIR nccl.h HINTS ${switchyard_nccl_roots} ${CUDAToolkit_INCLUDE_DIRS}
            PATH_SUFFIXES include)
  # The library beside the header first, so that both come from one NCCL (the wheel has only .so.2).
  get_filename_component(switchyard_nccl_header_root "${SWITCHYARD_NCCL_INCLUDE_DIR}" DIRECTORY)
  find_library(SWITCHYARD_NCCL_LIBRARY NAMES nccl libnccl.so.2
               HINTS ${switchyard_nccl_header_root} ${switchyard_nccl_roots} ${switchyard_cuda_root}
               PATH_SUFFIXES lib lib64)
  if(NOT SWITCHYARD_NCCL_INCLUDE_DIR OR NOT SWITCHYARD_NCCL_LIBRARY)
    set(switchyard_nccl_gin_missing "NCCL not found (nccl.h and libnccl, set NCCL_ROOT)")
  elseif(NOT EXISTS "${SWITCHYARD_NCCL_INCLUDE_DIR}/nccl_device.h")
    set(switchyard_nccl_gin_missing "the NCCL at ${SWITCHYARD_NCCL_INCLUDE_DIR} has no device API (nccl_device.h)")
  else()
    file(STRINGS "${SWITCHYARD_NCCL_INCLUDE_DIR}/nccl.h" switchyard_nccl_version_lines REGEX "^#define NCCL_(MAJOR|MINOR) +[0-9]+")
    string(REGEX REPLACE ".*NCCL_MAJOR +([0-9]+).*" "\\1" switchyard_nccl_major "${switchyard_nccl_version_lines}")
    string(REGEX REPLACE ".*NCCL_MINOR +([0-9]+).*" "\\1" switchyard_nccl_minor "${switchyard_nccl_version_lines}")
    set(switchyard_nccl_version "${switchyard_nccl_major}.${switchyard_nccl_minor}")
    if(switchyard_nccl_version VERSION_LESS 2.28)
      set(switchyard_nccl_gin_missing "the NCCL at ${SWITCHYARD_NCCL_INCLUDE_DIR} is ${switchyard_nccl_version}, older than 2.28")
    else()
      # NOTES: 2.28 releases differ in the device-communicator fields we set (an early 2.28 on the GPU
      # machine lacked ginForceEnable / ginContextCount / ginSignalCount): test for them.
      include(CheckCXXSourceCompiles)
      set(CMAKE_REQUIRED_INCLUDES ${SWITCHYARD_NCCL_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS})
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
            "the NCCL ${switchyard_nccl_version} at ${SWITCHYARD_NCCL_INCLUDE_DIR} lacks the GIN fields of ncclDevCommRequirements (ginForceEnable, ginContextCount, ginSignalCount)")
      endif()
    endif()
  endif()
endif()

if(switchyard_nccl_gin_missing STREQUAL "")
  message(STATUS "switchyard: nccl_gin ON (NCCL ${switchyard_nccl_version}, ${SWITCHYARD_NCCL_LIBRARY})")
  target_compile_definitions(switchyard PRIVATE SWITCHYARD_WITH_NCCL_GIN=1)
  target_include_directories(switchyard SYSTEM PRIVATE ${SWITCHYARD_NCCL_INCLUDE_DIR})
  target_link_libraries(switchyard PRIVATE ${SWITCHYARD_NCCL_LIBRARY})
  # In-tree tests and tools see the same configuration (nccl_gin.hpp, nccl_gin.cuh).
  target_compile_definitions(switchyard_internal INTERFACE SWITCHYARD_WITH_NCCL_GIN=1)
  target_include_directories(switchyard_internal SYSTEM INTERFACE ${SWITCHYARD_NCCL_INCLUDE_DIR})
else()
  message(STATUS "switchyard: nccl_gin OFF: ${switchyard_nccl_gin_missing}")
  target_compile_definitions(switchyard PRIVATE "SWITCHYARD_NCCL_GIN_MISSING=\"${switchyard_nccl_gin_missing}\"")
endif()
