# LibTorch settings of every target that includes LibTorch (the trainer's libraries, its tests
# and benchmarks). Included from MtHelpers.cmake so that any folder may use it, whatever the
# order of add_subdirectory.

# mt_torch_target(target): LibTorch settings shared by every LibTorch target of the worker:
# LibTorch's headers as SYSTEM (its warnings are not ours under -Werror), linked after
# protobuf/gRPC (DESIGN.md §2), and a precompiled header (parsing LibTorch's headers costs
# ~15 s per translation unit otherwise). Two PCHs in all, because libraries (-fPIC) and
# executables (-fPIE) cannot share one: mt_model's for the libraries, mt_model_test's for the
# test executables.
function(mt_torch_target target)
  # A test that mt_add_test did not add (MT_BUILD_TESTS off, or a GPU-only test without CUDA).
  if(NOT TARGET ${target})
    return()
  endif()
  # A pip LibTorch ships Protobuf 3.13 headers in its include/google/: the distribution's
  # Protobuf headers (which the generated .pb.h files need) go first (DESIGN.md §2).
  target_include_directories(${target} SYSTEM BEFORE PRIVATE ${Protobuf_INCLUDE_DIRS})
  target_include_directories(${target} SYSTEM PRIVATE ${TORCH_INCLUDE_DIRS})
  target_link_libraries(${target} PUBLIC ${TORCH_LIBRARIES})
  # The PCH is built with -pthread (_REENTRANT), which most targets get from absl/protobuf; a
  # target reusing it without those deps must still compile with the same flag.
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-pthread>)
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "EXECUTABLE" AND MT_BUILD_TESTS)
    set(owner mt_model_test)
  elseif(type STREQUAL "EXECUTABLE")
    set(owner ${target})  # no tests, no mt_model_test: each executable builds its own PCH
  else()
    set(owner mt_model)
  endif()
  if(target STREQUAL owner)
    target_precompile_headers(${target} PRIVATE
      "$<$<COMPILE_LANGUAGE:CXX>:${PROJECT_SOURCE_DIR}/worker/model/torch_pch.h>")
  else()
    target_precompile_headers(${target} REUSE_FROM ${owner})
  endif()
endfunction()
