#!/usr/bin/env bash
# Installs the Debian packages lynxgen needs, skipping those already present.
# Idempotent: a second run installs nothing and touches nothing.
set -euo pipefail

packages=(
  build-essential clang libclang-16-dev libclang-rt-14-dev
  openmpi-bin libopenmpi-dev
  libglpk-dev libopenblas-dev libssl-dev libcjson-dev
  python3 python3-numpy python3-pip fortunes-min
)

missing=()
for pkg in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done

if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "deps: all Debian packages present"
fi

# The tests' numerical references use numpy. Debian's python3-numpy serves
# /usr/bin/python3; a python3 that comes first in PATH (pyenv, a venv) gets
# numpy from PyPI instead, since the tests call whichever python3 PATH names.
if python3 -c 'import numpy' 2>/dev/null; then
  echo "deps: numpy present for $(command -v python3)"
else
  echo "deps: installing numpy for $(command -v python3)"
  python3 -m pip install -q numpy ||
    python3 -m pip install -q --break-system-packages numpy
fi

# The CUDA programs' attention (ATTENTION=cudnn) compiles against the cuDNN
# frontend's headers, which PyPI ships; its Python dependencies are not needed.
frontend=nvidia-cudnn-frontend==1.32.0
if python3 -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("cudnn") is None)'; then
  echo "deps: the cuDNN frontend's headers are present"
else
  echo "deps: installing $frontend (headers only, --no-deps)"
  python3 -m pip install -q --no-deps --break-system-packages "$frontend" ||
    python3 -m pip install -q --no-deps "$frontend"
fi

cuda_home=${CUDA_HOME:-}
if [ -z "$cuda_home" ]; then
  if [ -x /usr/local/cuda/bin/nvcc ]; then cuda_home=/usr/local/cuda
  elif command -v nvcc >/dev/null; then cuda_home=$(dirname "$(dirname "$(command -v nvcc)")")
  fi
fi
if [ -n "$cuda_home" ]; then
  echo "deps: CUDA at $cuda_home"
else
  echo "deps: no CUDA toolkit found (CPU target only; CUDA compile tests will be skipped)"
fi
