# Sourced by the scripts/gpu_*.sh runners on the GPU machine: $OUT, egglog from the carried .devpkgs
# (bash ../shared/device/pack-egglog.sh makes it), and the env every GPU run shares.
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
if ! python3 -c "import egglog" 2>/dev/null; then
  mkdir -p .devsite && tar -xJf .devpkgs/egglog-py312.tar.xz -C .devsite \
    && python3 -m pip install -q --no-index --no-deps --target .devsite .devpkgs/*.whl || exit 1
  export PYTHONPATH=$PWD/.devsite:$PWD
fi
export PYTHONUNBUFFERED=1 LUMINAL_CACHE=$PWD/.lcache HYPOTHESIS_PROFILE=dev
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
