#!/usr/bin/env bash
# The CUDA sections of our C++ (`#if MT_*_WITH_CUDA`), and the sources built only with a CUDA
# LibTorch (the kernel benches: they include ATen/cuda or bench/engine/kernel_bench.h), checked
# on a machine without a CUDA LibTorch (a development machine, when no GPU machine is lent):
# g++ -fsyntax-only against Debian's LibTorch headers (1.13, which ships ATen/cuda and c10/cuda)
# and the CUDA toolkit's (/usr/local/cuda), with every MT_*_WITH_CUDA switch set. It catches
# what an edit breaks in code the CPU build never compiles, before the GPU machine's build does;
# it links and runs nothing. The CUDA kernels themselves (.cu) are compiled by the CPU build
# where nvcc is found.
#
#   tools/check_cuda_paths.sh [--build DIR] [--since REV | FILE...]
#
# FILE...: these files; --since REV: the .cc files changed since REV that have CUDA sections or
# are CUDA-only; default: every such .cc file. --build: the CPU build whose generated Protocol
# Buffers headers the files include (default build/). Runs a g++ per core; progress on stderr.
#
# LibTorch 2.x calls that 1.13 lacks are declared by a stand-in header (STAND_INS below): a call
# to one of them is checked only for its name. Exit 0 clean, 1 a file has errors, 2 usage or
# setup (no Debian LibTorch headers, no CUDA toolkit).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root" || exit 2
build=build
since=""
files=()
while [ $# -gt 0 ]; do
  case $1 in
    --build) build=${2:?--build needs a directory}; shift 2 ;;
    --since) since=${2:?--since needs a git revision}; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "check_cuda_paths: unknown flag $1 (see --help)" >&2; exit 2 ;;
    *) files+=("$1"); shift ;;
  esac
done

torch_api=/usr/include/torch/csrc/api/include
cuda_inc=${CUDA_HOME:-/usr/local/cuda}/include
[ -f /usr/include/ATen/cuda/CUDAContext.h ] && [ -d "$torch_api" ] || {
  echo "check_cuda_paths: no Debian LibTorch headers with ATen/cuda (apt-get install libtorch-dev)" >&2
  exit 2
}
[ -f "$cuda_inc/cuda_runtime_api.h" ] || {
  echo "check_cuda_paths: no CUDA toolkit headers in $cuda_inc (set CUDA_HOME)" >&2
  exit 2
}
[ -d "$build/proto/gen" ] || {
  echo "check_cuda_paths: no generated headers in $build/proto/gen (build first: deploy/setup.sh)" >&2
  exit 2
}

cuda_code='MT_[A-Z_]*WITH_CUDA|#include <ATen/cuda/|#include "bench/engine/kernel_bench.h"'
with_cuda() { grep -lE "$cuda_code" "$@" 2>/dev/null; }
if [ ${#files[@]} -eq 0 ]; then
  if [ -n "$since" ]; then
    mapfile -t changed < <(git diff --name-only --diff-filter=d "$since" -- '*.cc')
    [ ${#changed[@]} -gt 0 ] && mapfile -t files < <(with_cuda "${changed[@]}")
  else
    mapfile -t files < <(git ls-files '*.cc' | xargs grep -lE "$cuda_code")
  fi
fi
if [ ${#files[@]} -eq 0 ]; then
  echo "check_cuda_paths: no file with a CUDA section to check" >&2
  exit 0
fi

# A build-time header that Debian's package leaves out, and the 2.x API that 1.13 lacks.
stand_ins=$(mktemp -d)
trap 'rm -rf "$stand_ins"' EXIT
mkdir -p "$stand_ins/c10/cuda/impl"
echo '#pragma once' > "$stand_ins/c10/cuda/impl/cuda_cmake_macros.h"
cat > "$stand_ins/stand_ins.h" <<'EOF'
// STAND_INS: LibTorch 2.x declarations that Debian's 1.13 headers lack.
#pragma once
#include <cublasLt.h>
namespace at::cuda {
cublasLtHandle_t getCurrentCUDABlasLtHandle();
}  // namespace at::cuda
EOF
switches=$(git grep -hoE 'MT_[A-Z_]*WITH_CUDA' -- '*.cc' '*.h' | sort -u | sed 's/$/=1/; s/^/-D/')
export stand_ins torch_api cuda_inc build switches
check_one() {
  # shellcheck disable=SC2086
  if out=$(g++ -std=c++17 -fsyntax-only $switches -DMT_HAVE_KINETO=1 -include "$stand_ins/stand_ins.h" \
             -I. -I"$build/proto/gen" -I"$stand_ins" -isystem "$torch_api" -isystem "$cuda_inc" \
             "$1" 2>&1); then
    echo "check_cuda_paths: ok $1" >&2
  else
    printf 'check_cuda_paths: FAILED %s\n%s\n' "$1" "$(grep -E 'error' <<<"$out" | head -n 20)"
    return 1
  fi
}
export -f check_one
echo "check_cuda_paths: ${#files[@]} file(s), $(nproc) at a time" >&2
printf '%s\n' "${files[@]}" | xargs -P "$(nproc)" -I{} bash -c 'check_one "$1"' _ {}
rc=$?
[ $rc -eq 0 ] && { echo "check_cuda_paths: ${#files[@]} file(s) clean"; exit 0; }
exit 1
