#!/usr/bin/env bash
# `make images`: builds llmserve's three images from deploy/docker/Dockerfile.
# Usage: build-images.sh PREFIX VERSION   (tags PREFIX/gateway:VERSION, PREFIX/worker:VERSION,
#                                          PREFIX/worker:VERSION-cuda)
# LLMSERVE_IMAGES=gateway,worker-cpu picks a subset (the CUDA build downloads NVIDIA's toolkit).
set -euo pipefail
prefix=${1:?usage: build-images.sh PREFIX VERSION}
version=${2:?usage: build-images.sh PREFIX VERSION}
cd "$(dirname "$0")/../.."

if ! command -v docker >/dev/null 2>&1; then
  echo "images: docker is not installed; the images need a Docker (or compatible) engine" >&2
  exit 1
fi
if ! docker info >/dev/null 2>&1; then
  echo "images: no Docker engine answers ('docker info' fails): start one, or set DOCKER_HOST" >&2
  exit 1
fi
revision=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
IFS=, read -r -a targets <<<"${LLMSERVE_IMAGES:-gateway,worker-cpu,worker-cuda}"
for target in "${targets[@]}"; do
  case "$target" in
    gateway) tag="$prefix/gateway:$version" ;;
    worker-cpu) tag="$prefix/worker:$version" ;;
    worker-cuda) tag="$prefix/worker:$version-cuda" ;;
    *) echo "images: unknown image '$target' (gateway, worker-cpu, worker-cuda)" >&2; exit 2 ;;
  esac
  echo "images: building $tag (target $target)"
  DOCKER_BUILDKIT=1 docker build -f deploy/docker/Dockerfile --target "$target" \
    --build-arg VERSION="$version" --build-arg REVISION="$revision" -t "$tag" .
done
echo "images: built ${targets[*]}"
