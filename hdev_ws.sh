set -uo pipefail
mkdir -p .devsite && tar -xJf .devpkgs/egglog-py312.tar.xz -C .devsite && python3 -m pip install -q --no-index --no-deps --target .devsite .devpkgs/*.whl || exit 1
export PYTHONPATH=$PWD/.devsite:$PWD PYTHONUNBUFFERED=1
cat > /tmp/wslog.py <<'PY'
import runpy, sys
from luminal.backends.cuda.host import lt
orig = lt.workspace
def ws(stream, n):
    r = orig(stream, n)
    if n: print(f"[ws] ask {n} -> 0x{r[0]:x} size {r[1]}", file=sys.stderr)
    return r
lt.workspace = ws
sys.argv = ["bench/models.py"] + sys.argv[1:]
runpy.run_path("bench/models.py", run_name="__main__")
PY
if false; then
LUMINAL_CACHE=$PWD/.lc1 timeout 250 python3 /tmp/wslog.py --preset llama-3.2-1b --layers 1 --prompt 8 --new 2 --backend cuda > $OUT/fixed.log 2>&1; echo rc=$?
grep -v "^\[ws\]" $OUT/fixed.log | tail -8; grep "^\[ws\]" $OUT/fixed.log | sort | uniq -c | head
fi
cp hdev_lt_orig.py luminal/backends/cuda/host/lt.py
LUMINAL_CACHE=$PWD/.lc2 timeout 250 python3 /tmp/wslog.py --preset llama-3.2-1b --layers 1 --prompt 8 --new 2 --backend cuda > $OUT/orig.log 2>&1; echo rc=$?; grep -v '^\[ws\]' $OUT/orig.log | tail -15; grep '^\[ws\]' $OUT/orig.log | head -12
