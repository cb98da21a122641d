#!/usr/bin/env bash
# Builds what scripts/gpu/check.sh runs on a GPU machine and packs it, stripped, with every shared
# library the binaries need that a bare CUDA image lacks, into .gpu-bundle/bundle.tar.xz
# (git-ignored; it travels with the working tree when the device run names .gpu-bundle in carry).
#
#   bash scripts/gpu/bundle.sh [BUILD_DIR]      (default: build, configured as `make build` does)
#
# Left out on purpose: glibc, libstdc++ and libgcc_s (every CUDA image has newer ones; the
# binaries need glibc >= 2.36 and GCC 12's libstdc++) and the CUDA libraries (libcudart, libcublas, libcublasLt 13), which the CUDA image has
# and which are hundreds of MB.
set -euo pipefail
cd "$(dirname "$0")/../.."
build="${1:-build}"
bundle=.gpu-bundle
limit_mib=60

if [[ ! -f "$build/build.ninja" ]]; then
  make configure BUILD_DIR="$build"
fi
if ! ninja -C "$build" -t targets all 2>/dev/null | grep -q '^llmserve_cuda:'; then
  echo "bundle.sh: $build has no CUDA plugin target (nvcc not found when it was configured)" >&2
  exit 1
fi

tests=(cuda_kernels_test cuda_backend_test cuda_quantized_kernels_test
  cuda_quantized_backend_test cuda_lora_test cuda_plugin_loader_test cuda_weight_layout_test)
tools=(llmserve-bench-engine llmserve-make-model llmserve-dump-logits llmserve-worker
  llmserve-gateway llmserve-cli)
cmake --build "$build" -j "${JOBS:-$(nproc)}" --target "${tests[@]}" llmserve_bench_engine \
  llmserve_make_model llmserve_dump_logits worker_main gateway_main llmserve_cli llmserve_cuda

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/lib" "$stage/tests" "$stage/deps"
for t in "${tests[@]}"; do strip -o "$stage/tests/$t" "$build/tests/$t"; done
for t in "${tools[@]}"; do strip -o "$stage/bin/$t" "$build/bin/$t"; done
strip -o "$stage/lib/libllmserve_cuda.so" "$build/lib/libllmserve_cuda.so"

# Every library ldd resolves for them, by its soname, except glibc's and CUDA's.
skip='^(linux-vdso|ld-linux-x86-64|libstdc\+\+|libgcc_s|libc|libm|libdl|libpthread|librt|libresolv|libcuda|libcudart|libcublas|libcublasLt)\.so'
for f in "$stage"/tests/* "$stage"/bin/* "$stage/lib/libllmserve_cuda.so"; do
  ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r soname path; do
  [[ "$soname" =~ $skip ]] && continue
  strip --strip-unneeded -o "$stage/deps/$soname" "$(readlink -f "$path")"
done

cp scripts/gpu/check.sh scripts/gpu/hf_parity.py "$stage/"
git rev-parse HEAD >"$stage/COMMIT" 2>/dev/null || echo unknown >"$stage/COMMIT"
git status --porcelain --untracked-files=no | sed 's/^/dirty: /' >>"$stage/COMMIT" || true

mkdir -p "$bundle"
rm -f "$bundle/bundle.tar.xz"
tar -C "$stage" -cf - . | xz -6 -T "${JOBS:-$(nproc)}" >"$bundle/bundle.tar.xz"
size=$(stat -c %s "$bundle/bundle.tar.xz")
echo "bundle.sh: $bundle/bundle.tar.xz $((size / 1024 / 1024)) MiB" \
  "($(ls "$stage/deps" | wc -l) libraries, $(du -sm "$stage" | cut -f1) MiB unpacked)"
if ((size > limit_mib * 1024 * 1024)); then
  echo "bundle.sh: the bundle is over ${limit_mib} MiB; the device tool carries 64 MiB in all" >&2
  exit 1
fi
