#!/usr/bin/env bash
# Installs a CUDA 13 compiler (nvcc, its front end, NVVM, the runtime's headers
# and libraries, CCCL) from PyPI's nvidia-* wheels into the folder $1 and
# prints the toolkit's root ($1/nvidia/cu13): a CUDA plugin wheel can then be
# built where no CUDA toolkit is installed (a manylinux container, a machine
# with jax[cuda13] and no nvcc). Point the build at it with
#   CUDACXX="$root/bin/nvcc"
#
# CUDA 13.0 is pinned: code built with the oldest 13.x toolkit runs with every
# driver that supports CUDA 13, and with the newer nvidia-cuda-runtime 13.x
# that jax[cuda13] installs. PYTHON picks the pip that installs them
# (python3 by default).
#
# The wheels are laid out as a toolkit root except for three names nvcc and
# CMake look for, which are linked here: targets/x86_64-linux (nvcc.profile's
# include and library folders), lib64, and the unversioned libcudart.so that
# CMake's CUDA::cudart links.
#
#   root=$(bash scripts/cuda_plugin/toolkit_from_pypi.sh build/cuda13-pypi)
set -euo pipefail
dir="${1:?usage: toolkit_from_pypi.sh FOLDER}"
python="${PYTHON:-python3}"
version="13.0.*"
mkdir -p "$dir"
"$python" -m pip install --quiet --disable-pip-version-check --upgrade --target "$dir" \
  "nvidia-cuda-nvcc==$version" "nvidia-cuda-crt==$version" "nvidia-nvvm==$version" \
  "nvidia-cuda-runtime==$version" "nvidia-cuda-cccl==$version" >&2
root="$(cd "$dir/nvidia/cu13" && pwd)"
mkdir -p "$root/targets"
ln -sfn .. "$root/targets/x86_64-linux"
ln -sfn lib "$root/lib64"
ln -sfn libcudart.so.13 "$root/lib/libcudart.so"
"$root/bin/nvcc" --version >&2
echo "$root"
