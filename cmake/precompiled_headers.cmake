# Precompiled headers: the standard library, fmt and nlohmann/json, which most files include,
# are parsed once per build instead of once per file. Two headers: sluice_pch for libraries and
# binaries, sluice_test_pch (the same and gtest) for the test binaries; every other C++ target
# reuses one of them (REUSE_FROM), so each is compiled once. -Winvalid-pch (which CMake adds)
# with -Werror makes a header that a target cannot use a build error, not a silent slowdown.
#
# The headers are named with <>, so the generated cmake_pch.hxx holds no path of the checkout
# and a compiler cache shares the compiled header between two clones (see ccache in
# CMakeLists.txt). That holds for g++ only: clang is handed the PCH as `-Xclang -include-pch
# PATH`, an absolute path that ccache does not rewrite, so a second clone would miss every file;
# the asan preset (clang-19) builds without (SLUICE_PCH=OFF).
#
# Left out, on purpose:
#   - CLI11: its header defines validator objects that every file including it compiles
#     anew (14 s a file under ASan); a PCH cannot save that. The sluice binary is a unity build
#     instead (src/cli/CMakeLists.txt).
#   - Boost.Asio/Beast: ten files use them; they are compiled separately (common/asio_impl.cc),
#     and in the PCH they would add 0.3 s to each of the 130 other files.
#   - Highway: its per-target re-inclusion (foreach_target.h) must see the headers itself.
set(SLUICE_PCH_HEADERS
  <algorithm> <array> <atomic> <chrono> <cmath> <cstdint> <cstdio> <cstdlib> <cstring> <deque>
  <expected> <filesystem> <fstream> <functional> <iostream> <limits> <map> <memory> <mutex>
  <numeric> <optional> <random> <set> <span> <sstream> <string> <string_view> <thread>
  <unordered_map> <utility> <vector>
  <fmt/format.h> <nlohmann/json.hpp>)

# All buildsystem targets in DIR and below.
function(_sluice_targets_below dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub ${subdirs})
    _sluice_targets_below(${sub} below)
    list(APPEND targets ${below})
  endforeach()
  set(${out} ${targets} PARENT_SCOPE)
endfunction()

# Call once, after every target is defined. A source that must not see the headers sets
# SKIP_PRECOMPILE_HEADERS; a test target carries the SLUICE_TEST property (sluice_test sets it).
function(sluice_precompile_headers)
  if(NOT SLUICE_PCH)
    return()
  endif()
  file(WRITE ${CMAKE_BINARY_DIR}/sluice_pch.cc "// The translation unit that compiles the precompiled header.\n")
  add_library(sluice_pch OBJECT ${CMAKE_BINARY_DIR}/sluice_pch.cc)
  target_link_libraries(sluice_pch PRIVATE fmt::fmt nlohmann_json::nlohmann_json)
  target_precompile_headers(sluice_pch PRIVATE ${SLUICE_PCH_HEADERS})
  add_library(sluice_test_pch OBJECT ${CMAKE_BINARY_DIR}/sluice_pch.cc)
  target_link_libraries(sluice_test_pch PRIVATE fmt::fmt nlohmann_json::nlohmann_json GTest::gtest)
  target_precompile_headers(sluice_test_pch PRIVATE ${SLUICE_PCH_HEADERS} <gtest/gtest.h>)
  sluice_test_optimization(sluice_test_pch)

  _sluice_targets_below(${CMAKE_SOURCE_DIR} targets)
  foreach(t ${targets})
    get_target_property(type ${t} TYPE)
    if(t MATCHES "^sluice_(test_)?pch$" OR NOT type MATCHES "^(STATIC_LIBRARY|OBJECT_LIBRARY|EXECUTABLE)$")
      continue()
    endif()
    # What the headers need (FMT_SHARED, for one) must be defined in every file that uses them.
    target_link_libraries(${t} PRIVATE fmt::fmt nlohmann_json::nlohmann_json)
    get_target_property(is_test ${t} SLUICE_TEST)
    if(is_test)
      target_precompile_headers(${t} REUSE_FROM sluice_test_pch)
    else()
      target_precompile_headers(${t} REUSE_FROM sluice_pch)
    endif()
  endforeach()
endfunction()
