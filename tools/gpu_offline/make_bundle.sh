#!/bin/bash
# Builds a self-contained Python 3.11 + TensorFlow 2.15.1 + CUDA 12.2 bundle
# for running this repository's GPU checks on an offline Linux x86-64 GPU
# machine that lacks them (tools/gpu_offline/README.md). Run on a machine with
# network access and Python 3.11 (PYTHON, default python3.11):
#
#   bash tools/gpu_offline/make_bundle.sh [OUT_DIR] [CHUNK_BYTES]
#
# Writes OUT_DIR/bundle.tar.xz (~430 MB for an sm_90 GPU) and, if
# CHUNK_BYTES is given, splits it into OUT_DIR/c0, c1, ... of that size.
# Takes ~12 minutes on 2 cores, most of it xz.
set -euo pipefail
OUT=$(realpath -m "${1:-/tmp/tunas_gpu_bundle}")
CHUNK=${2:-}
PY=${PYTHON:-python3.11}
KEEP_ARCH=${KEEP_ARCH:-90}   # the GPU's architecture: 90 for an H100
W=$OUT/work
cd "$(dirname "$0")/../.."
REPO=$PWD
"$PY" -c 'import sys; assert sys.version_info[:2] == (3, 11)' 2>/dev/null || {
  echo "make_bundle.sh: '$PY' is not Python 3.11 (TensorFlow 2.15's GPU wheels); set PYTHON=/path/to/python3.11" >&2
  exit 2; }
for tool in gcc xz ldd; do
  command -v "$tool" >/dev/null || { echo "make_bundle.sh: needs $tool" >&2; exit 2; }
done
rm -rf "$W" && mkdir -p "$W/site" "$W/py/bin" "$W/py/lib/deps"

# TensorFlow's GPU wheel and its CUDA wheels, pinned like the CPU venv.
grep -v -i '^tensorflow-cpu\|^tensorflow==' requirements/cpu.txt > "$W/constraints.txt"
"$PY" -m pip install -q --target "$W/site" -c "$W/constraints.txt" \
  'tensorflow[and-cuda]==2.15.1' tensorflow-datasets==4.9.10 \
  tensorflow-metadata==1.16.1 absl-py 'numpy<2' pytest
cd "$W/site"
# XLA on the GPU (step_build=xla) compiles its kernels with the PTX
# assembler and links CUDA's math library (libdevice): kept, the rest of
# the compiler's wheel dropped (env.sh points XLA at them).
mv nvidia/cuda_nvcc "$W/cuda_nvcc"
mkdir -p nvidia/cuda_nvcc/bin nvidia/cuda_nvcc/nvvm
mv "$W/cuda_nvcc/bin/ptxas" nvidia/cuda_nvcc/bin/
mv "$W/cuda_nvcc/nvvm/libdevice" nvidia/cuda_nvcc/nvvm/
rm -rf "$W/cuda_nvcc"
# Not loaded by this project's steps: NCCL (several GPUs), the profiler,
# cuDNN's RNN/attention libraries, headers and static libraries.
rm -rf nvidia/nccl nvidia/cuda_cupti nvidia/nvjitlink clang \
  pyarrow tensorflow/include nvidia/cudnn/lib/libcudnn_adv_* \
  nvidia/cublas/lib/libnvblas.so.* nvidia/cufft/lib/libcufftw.so.* \
  nvidia/cusolver/lib/libcusolverMg.so.*
find . -name '*.a' -delete
find . -name __pycache__ -type d -prune -exec rm -rf {} +
# TensorFlow refuses the GPU unless these load, but none of this project's
# ops calls them: empty stand-ins with the same names.
echo 'void tunas_gpu_bundle_stand_in(void) {}' > "$W/stand_in.c"
for lib in curand/libcurand.so.10 cufft/libcufft.so.11 \
           cusolver/libcusolver.so.11 cusparse/libcusparse.so.12; do
  gcc -shared -fPIC -o "nvidia/${lib%%/*}/lib/${lib#*/}" \
    -Wl,-soname,"${lib#*/}" "$W/stand_in.c"
done
# Code for other GPUs: zeroed, so that it compresses to nothing.
find . -name '*.so*' -size +5M -print0 | xargs -0 "$PY" \
  "$REPO/tools/gpu_offline/strip_fatbins.py" --keep_arch="$KEEP_ARCH" > "$W/strip.jsonl"

# The interpreter, its standard library and the system libraries its
# extension modules link (appended last to the library path, so that the
# GPU machine's own copies win).
PREFIX=$("$PY" -c 'import sys; print(sys.base_prefix)')
cp "$(readlink -f "$("$PY" -c 'import sys; print(sys.executable)')")" "$W/py/bin/python3.11"
cp "$PREFIX"/lib/libpython3.11.so.1.0 "$W/py/lib/" 2>/dev/null || true
tar -C "$PREFIX/lib" -cf - --exclude=python3.11/site-packages \
  --exclude=python3.11/test --exclude=python3.11/idlelib \
  --exclude=python3.11/tkinter --exclude=python3.11/turtledemo \
  --exclude='__pycache__' --exclude='python3.11/config-3.11-*' python3.11 | tar -C "$W/py/lib" -xf -
mkdir -p "$W/py/lib/python3.11/site-packages"
for so in "$W"/py/lib/python3.11/lib-dynload/*.so; do ldd "$so"; done \
  | awk '/=> \// {print $3}' | sort -u \
  | grep -v -E '/(libc|libm|libpthread|libdl|librt|ld-linux|libpython|libX|libtk|libtcl)[.-]' \
  | xargs -r -I{} cp -L {} "$W/py/lib/deps/"

cd "$W"
tar -cf - py site | xz -9 -T0 -c > "$OUT/bundle.tar.xz"
if [ -n "$CHUNK" ]; then
  rm -f "$OUT"/c[0-9]*
  split -b "$CHUNK" -d -a 1 "$OUT/bundle.tar.xz" "$OUT/c"
fi
sha256sum "$OUT/bundle.tar.xz"
ls -la "$OUT"
