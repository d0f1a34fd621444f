"""Does the full run deliver what the preset promised? Train a preset on the default corpus.

Runs ``autotune train --preset P --max-steps N`` (a subprocess, into a temporary folder
unless ``--out``), then prints:

- the validation loss against the unigram baseline: the entropy (nats) of the training
  split's token distribution, the loss of the best model that ignores context; a model
  that learned anything is well below it;
- the run's steady tokens/s (warm-up steps, evaluation and checkpoints excluded; data
  loading included) against the tokens/s the preset recorded, and their ratio (target:
  within 10%).

    python benchmarks/preset_vs_train.py --preset presets/cpu/mu.yaml --max-steps 300
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

TARGET = 0.10  # steady tokens/s within 10% of the preset's


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", required=True, help="a preset file or name")
    parser.add_argument("--max-steps", type=int, default=300)
    parser.add_argument("--out", type=Path, default=None, help="run folder (default: temporary)")
    parser.add_argument("--device", default=None)
    parser.add_argument(
        "--trust-model", action="store_true", help="run the preset's model code if it is user code"
    )
    args = parser.parse_args(argv)

    import numpy as np

    from autotune.data.lm import unigram_entropy
    from autotune.preset import load_preset, resolve_preset

    preset = load_preset(resolve_preset(args.preset))
    with tempfile.TemporaryDirectory(prefix="preset-vs-train-") as tmp:
        out = args.out or Path(tmp) / "run"
        cmd = [
            sys.executable, "-m", "autotune", "train", "--preset", args.preset,
            "--max-steps", str(args.max_steps), "--out", str(out),
        ]  # fmt: skip
        if args.device:
            cmd += ["--device", args.device]
        if args.trust_model:
            cmd.append("--trust-model")
        print("$ " + " ".join(cmd), flush=True)
        load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        proc = subprocess.run(cmd)
        if proc.returncode != 0:
            print(f"autotune train failed (exit {proc.returncode})", file=sys.stderr)
            return proc.returncode
        summary = json.loads((out / "summary.json").read_text())
        data = json.loads((out / "data.json").read_text())
        tokens = np.fromfile(Path(data["cache"]) / "train.bin", dtype=np.uint16)
        baseline = unigram_entropy(tokens)
    load_after = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")

    val = (summary.get("eval") or {}).get("loss")
    train_tps = summary.get("steady_tokens_per_s")
    median_tps = summary.get("median_tokens_per_s")
    preset_tps = preset.measured.tokens_per_s
    ratio = train_tps / preset_tps if train_tps and preset_tps else None

    print()
    print(f"preset {preset.name}: {preset.model.name} {dict(preset.model.args) or ''}")
    print(f"hardware here: {platform.processor() or platform.machine()}; preset measured on "
          f"{preset.fingerprint.describe()}")  # fmt: skip
    print(f"load average: {load_before:.2f} before, {load_after:.2f} after")
    print()
    rows = [
        ("steps", f"{summary['steps']}"),
        ("validation loss (nats)", "-" if val is None else f"{val:.4f} (ppl {math.exp(val):.2f})"),
        ("unigram baseline (nats)", f"{baseline:.4f} (ppl {math.exp(baseline):.2f})"),
        ("below baseline by", "-" if val is None else f"{baseline - val:.4f} nats"),
        ("train steady tokens/s", "-" if train_tps is None else f"{train_tps:,.1f}"),
        ("  (from the median step)", "-" if median_tps is None else f"{median_tps:,.1f}"),
        ("preset tokens/s", "-" if preset_tps is None else f"{preset_tps:,.1f}"),
        ("ratio (train / preset)", "-" if ratio is None else f"{ratio:.3f}"),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key:<{width}}  {value}")
    print()
    loss_ok = val is not None and val < baseline
    speed_ok = ratio is not None and abs(ratio - 1) <= TARGET
    print(f"validation loss below the unigram baseline: {'yes' if loss_ok else 'NO'}")
    print(f"steady tokens/s within {TARGET:.0%} of the preset: {'yes' if speed_ok else 'NO'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
