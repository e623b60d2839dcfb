# Our code builds with warnings as errors; third-party headers are SYSTEM includes.
set(MT_WARNINGS -Wall -Wextra -Werror -Wno-unused-parameter)
# GCC 13 (the GPU machine's) at -O3 reports array-bounds / stringop false positives inside
# libstdc++'s inlined memmove, and dangling-reference ones for references returned by functions
# that take a temporary std::string; they stay warnings there.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU" AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 13)
  list(APPEND MT_WARNINGS -Wno-error=array-bounds -Wno-error=stringop-overflow
       -Wno-error=stringop-overread -Wno-error=restrict -Wno-error=dangling-reference)
endif()

function(mt_target_defaults target)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${MT_WARNINGS}>)
  target_include_directories(${target} PUBLIC ${PROJECT_SOURCE_DIR})
endfunction()

# mt_add_library(name SOURCES ... DEPS ...)
function(mt_add_library name)
  cmake_parse_arguments(A "" "" "SOURCES;DEPS" ${ARGN})
  add_library(${name} STATIC ${A_SOURCES})
  mt_target_defaults(${name})
  target_link_libraries(${name} PUBLIC ${A_DEPS})
endfunction()

# mt_add_test(name SOURCES ... DEPS ... LABELS ... [TIMEOUT s] [ANYWHERE gtest-filter] [COST s])
# One executable per module; every TEST becomes its own CTest entry with the given labels.
# ANYWHERE: the tests of a `gpu` binary that need no GPU (e.g. "*Cpu.*": the CPU fallbacks),
# labelled `unit` instead, so that CI runs them.
# COST: about how many seconds its longest test takes on CI's two cores. `ctest -j` starts the
# costliest tests first where it has no timings of its own (a fresh build, as in CI), so that a
# long test does not start last and run alone while the other core idles.
function(mt_add_test name)
  if(NOT MT_BUILD_TESTS)
    return()
  endif()
  cmake_parse_arguments(A "" "TIMEOUT;ANYWHERE;COST" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT A_LABELS)
    set(A_LABELS unit)
  endif()
  if(NOT A_TIMEOUT)
    set(A_TIMEOUT 300)
  endif()
  if(NOT A_COST)
    set(A_COST 0)
  endif()
  # A gpu-labelled binary with no test that runs without a GPU (no ANYWHERE) is built where
  # LibTorch has CUDA only: elsewhere its tests could only skip, and its ~20 CPU-seconds a
  # translation unit were ~220 of CI's build (bench/RESULTS.md, "CI time"). The GPU machine's
  # suite (tests/gpu/run.sh) builds and runs them all. Callers test `if(TARGET name)`.
  if("gpu" IN_LIST A_LABELS AND NOT A_ANYWHERE AND NOT MT_HAVE_CUDA)
    return()
  endif()
  add_executable(${name} ${A_SOURCES})
  mt_target_defaults(${name})
  # A test's own code is set-up and assertions; what it tests is in the libraries, which keep
  # the build type's flags (-O3 in Release). -O1 compiles a test translation unit 20-30% faster
  # (the optimiser is most of the time of one that includes LibTorch and GoogleTest, and test
  # objects are half of CI's build; bench/RESULTS.md, "CI time") and keeps the warnings that
  # need data-flow analysis.
  if(CMAKE_BUILD_TYPE STREQUAL "Release")
    target_compile_options(${name} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-O1>)
  endif()
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  # Without CUDA (CI's build) a test binary's sources compile as one translation unit: the
  # headers they share (GoogleTest, LibTorch, gRPC) are instantiated and optimised once instead
  # of once a file (the coordinator's 20 test files: 106 CPU-seconds apart, 31 as one;
  # bench/RESULTS.md, "CI time"). A test file's own helpers therefore need names of their own
  # within its binary. The GPU machine (16 cores) compiles them file by file.
  if(NOT MT_HAVE_CUDA)
    set_target_properties(${name} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 0)
  endif()
  target_link_libraries(${name} PRIVATE ${A_DEPS} GTest::gmock GTest::gtest_main)
  target_compile_definitions(${name} PRIVATE MT_ASSET_DIR="${MT_ASSET_DIR}"
                                             MT_SOURCE_DIR="${PROJECT_SOURCE_DIR}"
                                             MT_BINARY_DIR="${CMAKE_BINARY_DIR}")
  if(A_ANYWHERE)
    gtest_discover_tests(${name} TEST_FILTER "-${A_ANYWHERE}"
                         PROPERTIES LABELS "${A_LABELS}" TIMEOUT ${A_TIMEOUT} COST ${A_COST}
                         DISCOVERY_TIMEOUT 60)
    gtest_discover_tests(${name} TEST_FILTER "${A_ANYWHERE}"
                         PROPERTIES LABELS unit TIMEOUT ${A_TIMEOUT} DISCOVERY_TIMEOUT 60)
  else()
    gtest_discover_tests(${name} PROPERTIES LABELS "${A_LABELS}" TIMEOUT ${A_TIMEOUT}
                         COST ${A_COST} DISCOVERY_TIMEOUT 60)
  endif()
endfunction()

# mt_torch_target(target): LibTorch's include order, link order and precompiled header.
include(MtTorch)
