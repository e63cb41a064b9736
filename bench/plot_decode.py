"""Bar charts of bench/decode.py's JSON: decode tok/s (with each engine's % of the roofline) and TTFT.

    python bench/plot_decode.py bench/decode.json [-o docs/decode.png]

Needs matplotlib (not a luminal dependency: install it where you plot).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", help="the file bench/decode.py wrote")
    ap.add_argument("-o", "--out", default=None, help="PNG path (default: beside the JSON)")
    args = ap.parse_args(argv)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit("plot_decode.py needs matplotlib (pip install matplotlib)") from None
    data = json.loads(Path(args.json).read_text())
    rows = [r for r in data["rows"] if "tok_s" in r]
    models = list(dict.fromkeys(r["model"] for r in rows))
    engines = list(dict.fromkeys(r["engine"] for r in rows))
    at = {(r["model"], r["engine"]): r for r in rows}
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    width = 0.8 / max(len(engines), 1)
    for k, e in enumerate(engines):
        xs = [i + (k - (len(engines) - 1) / 2) * width for i in range(len(models))]
        tps = [at[(m, e)]["tok_s"] if (m, e) in at else 0 for m in models]
        bars = axes[0].bar(xs, tps, width, label=e)
        for b, m in zip(bars, models, strict=True):
            if (m, e) in at:
                axes[0].annotate(f"{at[(m, e)]['roofline_pct']:.0f}%", (b.get_x() + b.get_width() / 2, b.get_height()),
                                 ha="center", va="bottom", fontsize=7)  # fmt: skip
        ttft = [1e3 * at[(m, e)]["ttft_s"] if (m, e) in at else 0 for m in models]
        axes[1].bar(xs, ttft, width, label=e)
    for ax, title in ((axes[0], "decode tok/s (batch 1; label: % of copy roofline)"),
                      (axes[1], f"TTFT ms ({data['args'].get('ttft_prompt', '?')}-token prompt)")):  # fmt: skip
        ax.set_xticks(range(len(models)), models, rotation=15)
        ax.set_title(title)
        ax.legend()
    fig.tight_layout()
    out = Path(args.out) if args.out else Path(args.json).with_suffix(".png")
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
