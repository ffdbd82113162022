# FindNCCL: the one NCCL lookup of the build, used by the nccl_gin transport
# (src/transport/nccl_gin.cmake) and the bench's NCCL baseline (tools/bench/nccl.cmake), so that both
# compile against the same nccl.h and link the same libnccl.
#
#   list(APPEND CMAKE_MODULE_PATH ${PROJECT_SOURCE_DIR}/cmake)
#   find_package(NCCL)          # -DCMAKE_DISABLE_FIND_PACKAGE_NCCL=ON skips it (NCCL_FOUND false)
#
# Gives
#   NCCL::nccl              imported target (GLOBAL): the library and its include directory (SYSTEM)
#   NCCL_FOUND              header and library found
#   NCCL_VERSION            MAJOR.MINOR.PATCH, read from nccl.h
#   NCCL_INCLUDE_DIR        = SWITCHYARD_NCCL_INCLUDE_DIR (cache; set it to choose by hand)
#   NCCL_LIBRARY            = SWITCHYARD_NCCL_LIBRARY (cache; set it to choose by hand)
#   NCCL_HAS_DEVICE_API     nccl_device.h is beside nccl.h (the NCCL >= 2.28 device API)
#   NCCL_NOT_FOUND_REASON   why not, when NCCL_FOUND is false (for the callers' status lines)
#
# NOTES: header and library must come from one install. A header from one NCCL and a library from
# another compile and link, then disagree at run time (the GPU machine once paired torch's wheel
# nccl.h 2.28.9 with /usr/lib/x86_64-linux-gnu/libnccl.so 2.28.3: find_library tried the name `nccl`
# in every directory before `libnccl.so.2`, which is all the wheel has). So each candidate install is
# tried as a whole, header and library together, in this order:
#   1. NCCL_ROOT (CMake variable or environment), then NCCL_HOME (environment);
#   2. the nvidia-nccl wheel of the python3 on PATH (torch's NCCL: include/ and lib/libnccl.so.2);
#   3. the CUDA toolkit (NCCL ships inside some toolkits);
#   4. /usr/local and /usr (distribution packages: libnccl-dev).
# Only when no install has both does it fall back to any nccl.h and any libnccl, and then says so.
include(FindPackageHandleStandardArgs)

set(SWITCHYARD_NCCL_INCLUDE_DIR "" CACHE PATH "Directory of the nccl.h that switchyard compiles against (empty: search)")
set(SWITCHYARD_NCCL_LIBRARY "" CACHE FILEPATH "The libnccl that switchyard links (empty: search)")

# The library file of the install at `root` (NAMES_PER_DIR: the wheel has only libnccl.so.2, which
# must win over an unversioned libnccl.so elsewhere), or "" when there is none.
function(_switchyard_nccl_library_in root out)
  set(suffixes lib lib64)
  if(CMAKE_LIBRARY_ARCHITECTURE)
    list(APPEND suffixes lib/${CMAKE_LIBRARY_ARCHITECTURE})
  endif()
  find_library(_switchyard_nccl_candidate NAMES nccl libnccl.so.2 NAMES_PER_DIR PATHS "${root}"
               PATH_SUFFIXES ${suffixes} NO_DEFAULT_PATH NO_CACHE)
  if(_switchyard_nccl_candidate)
    set(${out} "${_switchyard_nccl_candidate}" PARENT_SCOPE)
  else()
    set(${out} "" PARENT_SCOPE)
  endif()
endfunction()

# Candidate install roots, most specific first (see the NOTES above).
function(_switchyard_nccl_roots out)
  set(roots)
  foreach(root IN ITEMS "${NCCL_ROOT}" "$ENV{NCCL_ROOT}" "$ENV{NCCL_HOME}")
    if(root)
      list(APPEND roots "${root}")
    endif()
  endforeach()
  find_program(SWITCHYARD_PYTHON3 NAMES python3)
  if(SWITCHYARD_PYTHON3)
    execute_process(COMMAND "${SWITCHYARD_PYTHON3}" -c "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])"
                    OUTPUT_VARIABLE wheel OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE wheel_status)
    if(wheel_status EQUAL 0 AND wheel)
      list(APPEND roots "${wheel}")
    endif()
  endif()
  if(CUDAToolkit_BIN_DIR)
    get_filename_component(cuda_root "${CUDAToolkit_BIN_DIR}" DIRECTORY)
    list(APPEND roots "${cuda_root}")
  endif()
  if(CUDAToolkit_LIBRARY_ROOT)
    list(APPEND roots "${CUDAToolkit_LIBRARY_ROOT}")
  endif()
  list(APPEND roots /usr/local /usr)
  list(REMOVE_DUPLICATES roots)
  set(${out} ${roots} PARENT_SCOPE)
endfunction()

# A pair this module found itself is looked for again when the places to look change (NCCL_ROOT set
# after the first configure, say); a pair set by hand stays.
set(_switchyard_nccl_where "${NCCL_ROOT}|$ENV{NCCL_ROOT}|$ENV{NCCL_HOME}")
if(DEFINED SWITCHYARD_NCCL_FOUND_PAIR
   AND SWITCHYARD_NCCL_FOUND_PAIR STREQUAL "${SWITCHYARD_NCCL_INCLUDE_DIR};${SWITCHYARD_NCCL_LIBRARY}"
   AND NOT SWITCHYARD_NCCL_FOUND_WHERE STREQUAL _switchyard_nccl_where)
  set(SWITCHYARD_NCCL_INCLUDE_DIR "" CACHE PATH "" FORCE)
  set(SWITCHYARD_NCCL_LIBRARY "" CACHE FILEPATH "" FORCE)
endif()

if(SWITCHYARD_NCCL_INCLUDE_DIR AND NOT SWITCHYARD_NCCL_LIBRARY)
  # The header was chosen by hand: the library of its own install.
  get_filename_component(_switchyard_nccl_root "${SWITCHYARD_NCCL_INCLUDE_DIR}" DIRECTORY)
  _switchyard_nccl_library_in("${_switchyard_nccl_root}" _switchyard_nccl_library)
  if(_switchyard_nccl_library)
    set(SWITCHYARD_NCCL_LIBRARY "${_switchyard_nccl_library}" CACHE FILEPATH "" FORCE)
  endif()
elseif(SWITCHYARD_NCCL_LIBRARY AND NOT SWITCHYARD_NCCL_INCLUDE_DIR)
  # The library was chosen by hand: the header of its own install.
  get_filename_component(_switchyard_nccl_root "${SWITCHYARD_NCCL_LIBRARY}" DIRECTORY)
  get_filename_component(_switchyard_nccl_root "${_switchyard_nccl_root}" DIRECTORY)
  if(EXISTS "${_switchyard_nccl_root}/include/nccl.h")
    set(SWITCHYARD_NCCL_INCLUDE_DIR "${_switchyard_nccl_root}/include" CACHE PATH "" FORCE)
  endif()
elseif(NOT SWITCHYARD_NCCL_INCLUDE_DIR AND NOT SWITCHYARD_NCCL_LIBRARY)
  _switchyard_nccl_roots(_switchyard_nccl_roots)
  foreach(_switchyard_nccl_root IN LISTS _switchyard_nccl_roots)
    if(EXISTS "${_switchyard_nccl_root}/include/nccl.h")
      _switchyard_nccl_library_in("${_switchyard_nccl_root}" _switchyard_nccl_library)
      if(_switchyard_nccl_library)
        set(SWITCHYARD_NCCL_INCLUDE_DIR "${_switchyard_nccl_root}/include" CACHE PATH "" FORCE)
        set(SWITCHYARD_NCCL_LIBRARY "${_switchyard_nccl_library}" CACHE FILEPATH "" FORCE)
        break()
      endif()
    endif()
  endforeach()
  if(NOT SWITCHYARD_NCCL_INCLUDE_DIR)
    # No install has both: any header and any library, reported as a possible mismatch below.
    find_path(_switchyard_nccl_any_include nccl.h HINTS ${_switchyard_nccl_roots} ${CUDAToolkit_INCLUDE_DIRS}
              PATH_SUFFIXES include NO_CACHE)
    find_library(_switchyard_nccl_any_library NAMES nccl libnccl.so.2 NAMES_PER_DIR HINTS ${_switchyard_nccl_roots}
                 PATH_SUFFIXES lib lib64 NO_CACHE)
    if(_switchyard_nccl_any_include AND _switchyard_nccl_any_library)
      set(SWITCHYARD_NCCL_INCLUDE_DIR "${_switchyard_nccl_any_include}" CACHE PATH "" FORCE)
      set(SWITCHYARD_NCCL_LIBRARY "${_switchyard_nccl_any_library}" CACHE FILEPATH "" FORCE)
    endif()
  endif()
  set(SWITCHYARD_NCCL_FOUND_PAIR "${SWITCHYARD_NCCL_INCLUDE_DIR};${SWITCHYARD_NCCL_LIBRARY}" CACHE INTERNAL "")
  set(SWITCHYARD_NCCL_FOUND_WHERE "${_switchyard_nccl_where}" CACHE INTERNAL "")
endif()

# Whether the pair is one install: the library lies under the header's root (<root>/include).
set(_switchyard_nccl_pairing "")
if(SWITCHYARD_NCCL_INCLUDE_DIR AND SWITCHYARD_NCCL_LIBRARY)
  get_filename_component(_switchyard_nccl_root "${SWITCHYARD_NCCL_INCLUDE_DIR}" DIRECTORY)
  string(FIND "${SWITCHYARD_NCCL_LIBRARY}" "${_switchyard_nccl_root}/" _switchyard_nccl_at)
  if(_switchyard_nccl_at EQUAL 0)
    set(_switchyard_nccl_pairing "header and library of one install (${_switchyard_nccl_root})")
  else()
    set(_switchyard_nccl_pairing
        "WARNING: header and library from different installs, which may disagree at run time; set NCCL_ROOT to one install")
  endif()
endif()

set(NCCL_INCLUDE_DIR "${SWITCHYARD_NCCL_INCLUDE_DIR}")
set(NCCL_LIBRARY "${SWITCHYARD_NCCL_LIBRARY}")
set(NCCL_VERSION "")
set(NCCL_HAS_DEVICE_API FALSE)
set(NCCL_NOT_FOUND_REASON "")
if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
  file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _switchyard_nccl_version_lines REGEX "^#define NCCL_(MAJOR|MINOR|PATCH) +[0-9]+")
  foreach(_switchyard_nccl_part IN ITEMS MAJOR MINOR PATCH)
    string(REGEX MATCH "NCCL_${_switchyard_nccl_part} +([0-9]+)" _switchyard_nccl_match "${_switchyard_nccl_version_lines}")
    string(APPEND NCCL_VERSION "${CMAKE_MATCH_1}.")
  endforeach()
  string(REGEX REPLACE "\\.$" "" NCCL_VERSION "${NCCL_VERSION}")
  if(EXISTS "${NCCL_INCLUDE_DIR}/nccl_device.h")
    set(NCCL_HAS_DEVICE_API TRUE)
  endif()
  # A distribution's library names its full version (libnccl.so.2.28.3); the wheel's and the
  # toolkit's do not. Where it does, it must match the header.
  get_filename_component(_switchyard_nccl_real_library "${NCCL_LIBRARY}" REALPATH)
  if(_switchyard_nccl_real_library MATCHES "libnccl\\.so\\.([0-9]+\\.[0-9]+\\.[0-9]+)$")
    set(_switchyard_nccl_library_version "${CMAKE_MATCH_1}")
    if(NOT _switchyard_nccl_library_version VERSION_EQUAL NCCL_VERSION)
      string(CONCAT _switchyard_nccl_pairing "WARNING: nccl.h is ${NCCL_VERSION} but ${_switchyard_nccl_real_library} is "
                    "${_switchyard_nccl_library_version}; set NCCL_ROOT to one install")
    endif()
  endif()
elseif(NCCL_INCLUDE_DIR)
  set(NCCL_NOT_FOUND_REASON "SWITCHYARD_NCCL_INCLUDE_DIR=${NCCL_INCLUDE_DIR} has no nccl.h")
endif()
if(NOT NCCL_NOT_FOUND_REASON AND (NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY))
  set(NCCL_NOT_FOUND_REASON
      "NCCL not found (nccl.h: '${NCCL_INCLUDE_DIR}', libnccl: '${NCCL_LIBRARY}'); set NCCL_ROOT or NCCL_HOME to its root")
endif()

find_package_handle_standard_args(NCCL REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR VERSION_VAR NCCL_VERSION
                                  REASON_FAILURE_MESSAGE "${NCCL_NOT_FOUND_REASON}")

if(NCCL_FOUND)
  set(NCCL_NOT_FOUND_REASON "")
  if(NOT TARGET NCCL::nccl)
    # GLOBAL: src/ and tools/bench/ are sibling directories and both link it.
    add_library(NCCL::nccl UNKNOWN IMPORTED GLOBAL)
    set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
                          INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
    set_property(GLOBAL PROPERTY SWITCHYARD_NCCL_PAIRING "${_switchyard_nccl_pairing}")
    message(STATUS "switchyard: NCCL ${NCCL_VERSION} (device API: ${NCCL_HAS_DEVICE_API}): "
                   "${NCCL_INCLUDE_DIR}/nccl.h, ${NCCL_LIBRARY}; ${_switchyard_nccl_pairing}")
  endif()
endif()
