# Finds every dependency from the distribution's packages (DESIGN.md §2). Nothing is fetched.
find_package(Threads REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
find_package(prometheus-cpp CONFIG REQUIRED)
find_package(civetweb CONFIG REQUIRED)  # the metrics endpoints' HTTP server
find_package(yaml-cpp CONFIG REQUIRED)  # writing YAML (spec export, mtctl -o yaml)
# libyaml (libyaml-dev) reads job specs: yaml-cpp 0.7's reader loops forever on some inputs.
find_path(MT_LIBYAML_INCLUDE yaml.h REQUIRED)
find_library(MT_LIBYAML_LIBRARY NAMES yaml REQUIRED)
add_library(mt_libyaml INTERFACE)
target_include_directories(mt_libyaml INTERFACE ${MT_LIBYAML_INCLUDE})
target_link_libraries(mt_libyaml INTERFACE ${MT_LIBYAML_LIBRARY})
find_package(SQLite3 REQUIRED)
find_package(OpenSSL REQUIRED)  # SHA-256 for checkpoint and cache manifests
if(MT_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()

find_program(MT_PROTOC protoc REQUIRED)
find_program(MT_GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)

# LibTorch: Debian's 1.13 (CPU) on development machines and CI, a CUDA LibTorch 2.x on GPU
# machines. CUDA support is detected from the LibTorch that is found, never hand-set.
set(MT_HAVE_TORCH OFF)
set(MT_HAVE_CUDA OFF)
set(MT_HAVE_GLOO OFF)
set(MT_HAVE_NCCL OFF)
if(MT_WITH_TORCH)
  find_package(Torch QUIET)
  if(Torch_FOUND)
    set(MT_HAVE_TORCH ON)
    if(TARGET torch_cuda OR "${TORCH_LIBRARIES}" MATCHES "torch_cuda")
      set(MT_HAVE_CUDA ON)
    endif()
    # Gloo is the CPU collective path; only the distribution's LibTorch ships its headers.
    find_path(MT_GLOO_PG_HEADER torch/csrc/distributed/c10d/ProcessGroupGloo.hpp
              HINTS ${TORCH_INCLUDE_DIRS})
    find_path(MT_GLOO_HEADER gloo/config.h)
    if(MT_GLOO_PG_HEADER AND MT_GLOO_HEADER)
      set(MT_HAVE_GLOO ON)
    endif()
    if(MT_HAVE_CUDA)
      find_path(MT_NCCL_INCLUDE nccl.h HINTS ${NCCL_ROOT}/include $ENV{NCCL_ROOT}/include)
      find_library(MT_NCCL_LIBRARY NAMES nccl libnccl.so.2
                   HINTS ${NCCL_ROOT}/lib $ENV{NCCL_ROOT}/lib)
      if(MT_NCCL_INCLUDE AND MT_NCCL_LIBRARY)
        set(MT_HAVE_NCCL ON)
      endif()
    endif()
  else()
    message(WARNING "LibTorch not found: the trainer (mt-worker train) is not built")
  endif()
endif()
message(STATUS "mt: torch=${MT_HAVE_TORCH} cuda=${MT_HAVE_CUDA} gloo=${MT_HAVE_GLOO} "
               "nccl=${MT_HAVE_NCCL} assets=${MT_ASSET_DIR}")
