#!/usr/bin/env bash
# Prepares .device/ on the development machine for the GPU machine (shared/device/README.md):
# the bundle of Debian-built libraries the GPU machine lacks (with libyaml, which our job-spec
# reader needs and the shared script does not pack by default), gpu-env.sh, and the GPT-2 BPE
# files the tokenizing GPU tests read (the GPU machine has no registry). Then a device run
# carries `.device` and calls tests/gpu/run.sh.
#
#   tests/gpu/prepare.sh [--shared DIR]     # DIR: the shared folder (default ../shared)
#
# Needs deploy/setup.sh to have run here (the -dev packages and ~/.cache/mt/assets). Idempotent:
# the bundle is made again each time (about 12 MB). Exit 0 ready, 1 a step failed, 2 usage.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
shared=$root/../shared
while [ $# -gt 0 ]; do
  case $1 in
    --shared) shared=${2:?--shared needs a directory}; shift 2 ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "prepare.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
assets=${MT_ASSET_DIR:-$HOME/.cache/mt/assets}
for f in "$shared/device/make-bundle.sh" "$shared/device/gpu-env.sh" \
         "$assets/gpt2-vocab.json" "$assets/gpt2-merges.txt"; do
  [ -f "$f" ] || { echo "prepare.sh: missing $f (deploy/setup.sh, or --shared)" >&2; exit 1; }
done
cd "$root"
mkdir -p .device/assets
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qx '/.device/' "$exclude" 2>/dev/null || echo '/.device/' >> "$exclude"
echo "prepare.sh: packing the bundle" >&2
"$shared/device/make-bundle.sh" .device/bundle.tgz libyaml-dev libyaml-0-2 >&2
cp -f "$shared/device/gpu-env.sh" .device/
cp -f "$assets/gpt2-vocab.json" "$assets/gpt2-merges.txt" .device/assets/
echo "prepare.sh: .device ready ($(du -sh .device | cut -f1)); carry [\".device\"] and run" \
     "tests/gpu/run.sh"
