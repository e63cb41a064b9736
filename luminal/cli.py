"""`luminal` console script: thin subcommands over the library (demo, run a model, viz)."""

from __future__ import annotations

import argparse
import importlib
import sys


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="luminal", description="luminal: a pure-Python ML inference compiler")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="run the demo (what `make demo` runs): Whisper tiny.en on a bundled clip")
    d.add_argument("--backend", default="auto", choices=["auto", "reference", "cuda"])
    d.add_argument("--dtype", default="auto", choices=["auto", "f32", "bf16", "f16"])
    r = sub.add_parser("run", help="run a model script: luminal run llama --model DIR --prompt ...")
    r.add_argument("model", choices=["llama", "qwen", "gemma", "whisper"])
    r.add_argument("rest", nargs=argparse.REMAINDER)
    args = p.parse_args(argv)
    from luminal.models.common import user_errors  # the model CLIs' rule: a LuminalError is one `error:` line

    with user_errors():
        if args.cmd == "demo":
            from luminal.demo import main as demo

            return demo(["--backend", args.backend, "--dtype", args.dtype])
        mod = importlib.import_module(f"luminal.models.{args.model}")
        return int(mod.main(args.rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
