#!/usr/bin/env python3
"""An image folder from Fashion-MNIST's test images, for trying `vitpe train --dataset folder:`.

Writes ROOT/train/CLASS/NNNNN.png and ROOT/test/CLASS/NNNNN.png (grayscale 28x28 PNGs): the first
--train images of Debian's dataset-fashion-mnist test split go to train/, the next --test to
test/. The ten classes become five new ones (tops: t-shirt, pullover, coat, shirt; trousers;
dresses; footwear: sandal, sneaker, ankle boot; bags), so a model trained on Fashion-MNIST needs
a new head for them. Only the standard library; nothing is downloaded.

    scripts/make_fmnist_folder.py /tmp/fm5 --train 4000 --test 2000
"""
import argparse
import gzip
import os
import struct
import sys
import zlib

CLASSES = ["top", "trousers", "top", "dress", "top", "footwear", "top", "footwear", "bag",
           "footwear"]


def png_gray(path, pixels, size=28):
    """A grayscale 8-bit PNG of size x size bytes."""
    def chunk(kind, data):
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body) & 0xFFFFFFFF)
    rows = b"".join(b"\0" + pixels[r * size:(r + 1) * size] for r in range(size))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", size, size, 8, 0, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("root", help="the folder to write (must not exist)")
    ap.add_argument("--train", type=int, default=4000, help="images in train/ (default 4000)")
    ap.add_argument("--test", type=int, default=2000, help="images in test/ (default 2000)")
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    a = ap.parse_args()
    if a.train < 1 or a.test < 1 or a.train + a.test > 10000:
        sys.exit(f"make_fmnist_folder: --train and --test must be >= 1 and sum to <= 10000, "
                 f"found {a.train} and {a.test}")
    if os.path.exists(a.root):
        sys.exit(f"make_fmnist_folder: {a.root} exists; give a new folder")
    try:
        images = gzip.open(os.path.join(a.data_dir, "t10k-images-idx3-ubyte.gz")).read()
        labels = gzip.open(os.path.join(a.data_dir, "t10k-labels-idx1-ubyte.gz")).read()
    except OSError as e:
        sys.exit(f"make_fmnist_folder: cannot read Fashion-MNIST in {a.data_dir} ({e}); "
                 "install Debian's dataset-fashion-mnist (scripts/setup does)")
    if images[:4] != b"\0\0\x08\x03" or labels[:4] != b"\0\0\x08\x01":
        sys.exit(f"make_fmnist_folder: {a.data_dir} does not hold IDX image and label files")
    images, labels = images[16:], labels[8:]
    for i in range(a.train + a.test):
        split = "train" if i < a.train else "test"
        folder = os.path.join(a.root, split, CLASSES[labels[i]])
        os.makedirs(folder, exist_ok=True)
        png_gray(os.path.join(folder, f"{i:05d}.png"), images[i * 784:(i + 1) * 784])
    print(f"wrote {a.train} training and {a.test} test images in 5 classes under {a.root}")


if __name__ == "__main__":
    main()
