#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""A small, deterministic deep-learning-style job for iolens' end-to-end tests.

    torch_job.py DATA_DIR CKPT_DIR --make-data [--files N]      create the dataset (only writes)
    torch_job.py DATA_DIR CKPT_DIR [--files N] [--epochs E] [--workers W]   train (only reads it)

Dataset: N files DATA_DIR/sample_NNNNN.npy, each np.save of a uint8 vector of 3073 bytes (a
32x32x3 image, then the label), 3201 bytes on disk.

Training: a torch Dataset whose __getitem__ is np.load(path) on one file; a DataLoader with
batch_size 32, W worker processes (fork), shuffle=True driven by a seeded generator and
persistent_workers=False, so every epoch forks W fresh workers; a tiny conv net; after each epoch
the main process writes CKPT_DIR/ckpt_epoch{e}.pt with torch.save(model.state_dict()).

Everything is seeded: two runs read the same files in the same order, and batch b of an epoch is
always loaded by worker b % W (the DataLoader hands batches to workers round-robin), so the set of
files each worker reads is the same from run to run. The main process never touches a dataset
file (it only lists the directory). Exit status 0 on success, 2 on a usage or dataset error.
"""

import argparse
import os
import sys
import time

SEED = 1234
IMG_SHAPE = (32, 32, 3)
IMG_BYTES = 32 * 32 * 3
CLASSES = 10


def file_name(i):
    return "sample_%05d.npy" % i


def make_data(data_dir, n):
    import numpy as np
    os.makedirs(data_dir, exist_ok=True)
    rng = np.random.default_rng(SEED)
    for i in range(n):
        label = i % CLASSES
        # Learnable but cheap: the class shifts the mean of one channel.
        img = rng.integers(0, 200, size=IMG_SHAPE, dtype=np.uint8)
        img[:, :, label % 3] += np.uint8(5 * label)
        rec = np.empty(IMG_BYTES + 1, dtype=np.uint8)
        rec[:IMG_BYTES] = img.reshape(-1)
        rec[IMG_BYTES] = label
        np.save(os.path.join(data_dir, file_name(i)), rec)


def dataset_files(data_dir, n):
    try:
        names = sorted(x for x in os.listdir(data_dir) if x.endswith(".npy"))
    except FileNotFoundError:
        names = []
    want = [file_name(i) for i in range(n)]
    if names != want:
        print("torch_job: %s does not hold the %d-file dataset (found %d .npy files); create it "
              "first with --make-data --files %d" % (data_dir, n, len(names), n), file=sys.stderr)
        sys.exit(2)
    return [os.path.join(data_dir, x) for x in names]


def train(data_dir, ckpt_dir, n, epochs, workers, batch_size):
    import numpy as np
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset

    torch.set_num_threads(1)
    torch.manual_seed(SEED)
    files = dataset_files(data_dir, n)
    os.makedirs(ckpt_dir, exist_ok=True)

    class NpyDataset(Dataset):
        def __init__(self, paths):
            self.paths = paths

        def __len__(self):
            return len(self.paths)

        def __getitem__(self, i):
            rec = np.load(self.paths[i])
            x = torch.from_numpy(rec[:IMG_BYTES].reshape(IMG_SHAPE).astype(np.float32))
            return x.permute(2, 0, 1) / 255.0, int(rec[IMG_BYTES])

    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(4), nn.Flatten(), nn.Linear(8 * 4 * 4, CLASSES))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    loader = DataLoader(NpyDataset(files), batch_size=batch_size, shuffle=True,
                        generator=torch.Generator().manual_seed(SEED), num_workers=workers,
                        persistent_workers=False,
                        multiprocessing_context="fork" if workers > 0 else None)
    for epoch in range(epochs):
        t0 = time.monotonic()
        seen, total, correct = 0, 0.0, 0
        model.train()
        for x, y in loader:
            opt.zero_grad()
            out = model(x)
            loss = loss_fn(out, y)
            loss.backward()
            opt.step()
            seen += len(y)
            total += loss.item() * len(y)
            correct += int((out.argmax(1) == y).sum())
        ckpt = os.path.join(ckpt_dir, "ckpt_epoch%d.pt" % epoch)
        torch.save(model.state_dict(), ckpt)
        print("epoch %d: %d samples, loss %.4f, acc %.3f, %.1fs, saved %s"
              % (epoch, seen, total / max(seen, 1), correct / max(seen, 1),
                 time.monotonic() - t0, ckpt), flush=True)


def main():
    ap = argparse.ArgumentParser(description="deterministic DL-style job for iolens tests")
    ap.add_argument("data_dir")
    ap.add_argument("ckpt_dir")
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--make-data", action="store_true",
                    help="create the dataset in DATA_DIR and exit (no training)")
    a = ap.parse_args()
    if a.make_data:
        make_data(a.data_dir, a.files)
        return 0
    train(a.data_dir, a.ckpt_dir, a.files, a.epochs, a.workers, a.batch_size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
