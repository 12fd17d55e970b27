#!/usr/bin/env python3
"""Trains the same small ViT with two position encodings on Fashion-MNIST and plots their test
accuracy against the evaluation size (zoomed images; each encoding meets the larger patch grid
under its own extension rule), with matplotlib when it is installed, else as a table.

    PYTHONPATH=build/python python3 python/examples/compare_encodings.py [OUT_DIR]

Takes a few minutes on 2 cores (2,000 training images, 3 epochs per encoding); OUT_DIR
(default runs/py-compare) gets results.json, results.csv and report.html. Ctrl-C stops it.
"""
import sys

import vitpe

out = sys.argv[1] if len(sys.argv) > 1 else "runs/py-compare"


def progress(p):
    if p["epoch_done"]:
        e = p["epoch_done"]
        print(f"{p['encoding']:>10} seed {p['seed']} epoch {e['epoch']}/{p['epochs']}: "
              f"train {100 * e['train_acc']:.1f} %, test {100 * e['test_acc']:.1f} %", flush=True)


results = vitpe.compare(out, model="vit-fmnist", encodings=["learned1d", "rope-axial"],
                        epochs=3, subset=2000, test_subset=1000, eval_sizes=[28, 44, 56],
                        pictures=False, progress=progress)
sizes = results["sizes"]
curves = {run["encoding"]: [100 * a for a in run["accuracy"]] for run in results["runs"]}
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    print("size  " + "  ".join(f"{name:>10}" for name in curves))
    for k, size in enumerate(sizes):
        print(f"{size:>4}  " + "  ".join(f"{curves[n][k]:>9.1f}%" for n in curves))
else:
    for name, acc in curves.items():
        plt.plot(sizes, acc, marker="o", label=name)
    plt.xlabel("evaluation size (px; trained at %d)" % results["train_size"])
    plt.ylabel("test accuracy (%)")
    plt.legend()
    plt.savefig(f"{out}/accuracy_vs_size.png", dpi=120)
    print(f"wrote {out}/accuracy_vs_size.png")
