# CUTLASS/CuTe headers for the CUDA MoE path's grouped GEMMs (docs/MOE.md), pinned in
# scripts/cutlass-version.txt and installed by scripts/install-cutlass.sh from the nvidia-cutlass
# package on PyPI. Found, in this order, at:
#   SWITCHYARD_CUTLASS_DIR               an include directory holding cutlass/cutlass.h, or a CUTLASS
#                                        checkout or nvidia-cutlass install above one;
#   build/deps/nvidia-cutlass-<version>  where scripts/install-cutlass.sh puts it;
#   the nvidia-cutlass package of the python3 on PATH.
# Defines the INTERFACE target switchyard::cutlass (its include and tools/util/include) and
# SWITCHYARD_HAS_CUTLASS. SWITCHYARD_CUTLASS=AUTO (default) goes without it when not found; ON requires it.
set(SWITCHYARD_CUTLASS "AUTO" CACHE STRING "CUTLASS headers for the CUDA MoE path: ON, OFF or AUTO (when found)")
set_property(CACHE SWITCHYARD_CUTLASS PROPERTY STRINGS AUTO ON OFF)
set(SWITCHYARD_CUTLASS_DIR "" CACHE PATH "Where the CUTLASS headers are (see cmake/cutlass.cmake)")

file(READ "${PROJECT_SOURCE_DIR}/scripts/cutlass-version.txt" SWITCHYARD_CUTLASS_VERSION)
string(STRIP "${SWITCHYARD_CUTLASS_VERSION}" SWITCHYARD_CUTLASS_VERSION)

set(SWITCHYARD_HAS_CUTLASS OFF)
if(SWITCHYARD_CUTLASS)
  set(_cutlass_hints)
  if(SWITCHYARD_CUTLASS_DIR)
    list(APPEND _cutlass_hints "${SWITCHYARD_CUTLASS_DIR}" "${SWITCHYARD_CUTLASS_DIR}/include"
         "${SWITCHYARD_CUTLASS_DIR}/cutlass_library/source/include")
  endif()
  list(APPEND _cutlass_hints
       "${PROJECT_SOURCE_DIR}/build/deps/nvidia-cutlass-${SWITCHYARD_CUTLASS_VERSION}/cutlass_library/source/include")
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_FOUND)
    execute_process(
      COMMAND "${Python3_EXECUTABLE}" -c
              "import cutlass_library, os; print(os.path.join(os.path.dirname(cutlass_library.__file__), 'source', 'include'))"
      OUTPUT_VARIABLE _cutlass_python_include OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _cutlass_python_status)
    if(_cutlass_python_status EQUAL 0)
      list(APPEND _cutlass_hints "${_cutlass_python_include}")
    endif()
  endif()
  find_path(SWITCHYARD_CUTLASS_INCLUDE_DIR cutlass/cutlass.h HINTS ${_cutlass_hints} NO_DEFAULT_PATH)
  if(SWITCHYARD_CUTLASS_INCLUDE_DIR)
    # The version the headers say, against the pin: a stale checkout is named, not compiled against.
    file(STRINGS "${SWITCHYARD_CUTLASS_INCLUDE_DIR}/cutlass/version.h" _cutlass_version_lines
         REGEX "#define CUTLASS_(MAJOR|MINOR|PATCH) ")
    set(_cutlass_found_version "")
    foreach(_part MAJOR MINOR PATCH)
      string(REGEX MATCH "CUTLASS_${_part} ([0-9]+)" _match "${_cutlass_version_lines}")
      list(APPEND _cutlass_found_version "${CMAKE_MATCH_1}")
    endforeach()
    string(REPLACE ";" "." _cutlass_found_version "${_cutlass_found_version}")
    string(REGEX MATCH "^[0-9]+\\.[0-9]+\\.[0-9]+" _cutlass_pinned "${SWITCHYARD_CUTLASS_VERSION}")
    if(NOT _cutlass_found_version STREQUAL _cutlass_pinned)
      message(FATAL_ERROR "CUTLASS at ${SWITCHYARD_CUTLASS_INCLUDE_DIR} is ${_cutlass_found_version}, expected "
                          "${_cutlass_pinned} (scripts/cutlass-version.txt); run scripts/install-cutlass.sh or "
                          "set SWITCHYARD_CUTLASS_DIR")
    endif()
    add_library(switchyard_cutlass INTERFACE)
    add_library(switchyard::cutlass ALIAS switchyard_cutlass)
    # SYSTEM: CUTLASS's own warnings are not switchyard's to fix.
    target_include_directories(switchyard_cutlass SYSTEM INTERFACE "${SWITCHYARD_CUTLASS_INCLUDE_DIR}"
                               "${SWITCHYARD_CUTLASS_INCLUDE_DIR}/../tools/util/include")
    set(SWITCHYARD_HAS_CUTLASS ON)
    message(STATUS "switchyard: CUTLASS ${_cutlass_found_version} at ${SWITCHYARD_CUTLASS_INCLUDE_DIR}")
  elseif(SWITCHYARD_CUTLASS STREQUAL "ON")
    message(FATAL_ERROR "SWITCHYARD_CUTLASS=ON but no CUTLASS headers were found: run scripts/install-cutlass.sh "
                        "or set SWITCHYARD_CUTLASS_DIR")
  else()
    message(STATUS "switchyard: CUTLASS not found (scripts/install-cutlass.sh installs it)")
  endif()
endif()
