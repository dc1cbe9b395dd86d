# Source from the repository root: `source tools/gpu_offline/env.sh ROOT`, where ROOT
# holds the unpacked bundle (py/ and site/; tools/gpu_offline/make_bundle.sh).
R=$1
export PYTHONHOME=$R/py PYTHONPATH=$R/site:$PWD PYTHONNOUSERSITE=1 PYTHONUNBUFFERED=1
L=""; for d in "$R"/site/nvidia/*/lib; do L="$L:$d"; done
CUDA_DRIVER=$( (ldconfig -p | awk '/libcuda.so.1 / {print $NF; exit}';
  find /usr/local/nvidia /usr/lib /usr/lib64 -name libcuda.so.1 2>/dev/null) | head -1)
export LD_LIBRARY_PATH="$R/py/lib${L}${CUDA_DRIVER:+:$(dirname "$CUDA_DRIVER")}:${LD_LIBRARY_PATH:-}:$R/py/lib/deps"
export PATH=$R/py/bin:$PATH
# XLA on the GPU (step_build=xla) needs ptxas and libdevice, which the bundle
# keeps from the CUDA compiler's wheel (make_bundle.sh).
if [ -d "$R/site/nvidia/cuda_nvcc/nvvm/libdevice" ]; then
  export XLA_FLAGS="${XLA_FLAGS:+$XLA_FLAGS }--xla_gpu_cuda_data_dir=$R/site/nvidia/cuda_nvcc"
  export PATH=$R/site/nvidia/cuda_nvcc/bin:$PATH
fi
unset VIRTUAL_ENV
