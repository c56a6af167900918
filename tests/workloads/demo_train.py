#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""iolens' built-in demo: a small deep-learning-style job to trace end to end.

    sudo iolens run -- /usr/bin/python3 tests/workloads/demo_train.py [--dir DIR]

It writes a synthetic dataset of 500 small .npy images, trains a small MLP for 2 epochs with a
2-worker PyTorch DataLoader (every sample is one np.load in a worker process), saves a checkpoint
(~6 MiB) after each epoch, and removes everything it wrote when it exits. Needs python3-torch and
python3-numpy (CPU is enough; a few seconds on 2 cores).

--dir DIR   work directory (default: a new iolens-demo-* directory under $TMPDIR, else /var/tmp).
            The demo writes DIR/data and DIR/ckpt and removes them at exit (DIR too if it
            created it).
"""

import argparse
import atexit
import os
import shutil
import signal
import sys
import tempfile
import time

FILES = 500
EPOCHS = 2
WORKERS = 2
BATCH = 32
SEED = 7


def main():
    ap = argparse.ArgumentParser(description="iolens demo: a small DL training job")
    ap.add_argument("--dir", help="work directory (default: a temporary one)")
    ap.add_argument("--files", type=int, default=FILES)
    ap.add_argument("--epochs", type=int, default=EPOCHS)
    ap.add_argument("--workers", type=int, default=WORKERS)
    a = ap.parse_args()

    if a.dir:
        work = os.path.abspath(a.dir)
        created = not os.path.exists(work)
        os.makedirs(work, exist_ok=True)
    else:
        base = os.environ.get("TMPDIR") or "/var/tmp"
        work = tempfile.mkdtemp(prefix="iolens-demo-", dir=base)
        created = True
    data, ckpt = os.path.join(work, "data"), os.path.join(work, "ckpt")
    main_pid = os.getpid()

    def cleanup():
        if os.getpid() != main_pid:  # DataLoader workers are forked: only the main cleans up
            return
        shutil.rmtree(data, ignore_errors=True)
        shutil.rmtree(ckpt, ignore_errors=True)
        if created:
            shutil.rmtree(work, ignore_errors=True)
    atexit.register(cleanup)
    # Clean up on `kill` and Ctrl-C as well (a SystemExit runs the atexit handler).
    signal.signal(signal.SIGTERM, lambda sig, frame: sys.exit(128 + sig))

    import numpy as np
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, Dataset

    torch.set_num_threads(1)
    torch.manual_seed(SEED)

    # 1. the dataset: one small file per sample, as image datasets often are
    t0 = time.monotonic()
    os.makedirs(data)
    os.makedirs(ckpt)
    rng = np.random.default_rng(SEED)
    paths = []
    for i in range(a.files):
        label = i % 10
        img = rng.integers(0, 200, size=(32, 32, 3), dtype=np.uint8)
        img[:, :, label % 3] += np.uint8(5 * label)
        p = os.path.join(data, "img_%05d_%d.npy" % (i, label))
        np.save(p, img)
        paths.append((p, label))
    print("demo: wrote %d samples to %s in %.1fs" % (len(paths), data, time.monotonic() - t0),
          flush=True)

    class Images(Dataset):
        def __len__(self):
            return len(paths)

        def __getitem__(self, i):
            p, label = paths[i]
            x = torch.from_numpy(np.load(p).astype(np.float32)).permute(2, 0, 1) / 255.0
            return x, label

    # An MLP big enough that its checkpoints (weights + momentum, ~6 MiB) top the file list.
    model = nn.Sequential(nn.Flatten(), nn.Linear(32 * 32 * 3, 256), nn.ReLU(), nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    loader = DataLoader(Images(), batch_size=BATCH, shuffle=True, num_workers=a.workers,
                        generator=torch.Generator().manual_seed(SEED),
                        multiprocessing_context="fork" if a.workers > 0 else None)

    # 2. training: the workers read the files, the main process trains and checkpoints
    for epoch in range(a.epochs):
        t0 = time.monotonic()
        seen, total = 0, 0.0
        for x, y in loader:
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            seen += len(y)
            total += loss.item() * len(y)
        path = os.path.join(ckpt, "model_epoch%d.pt" % epoch)
        torch.save({"epoch": epoch, "model": model.state_dict(), "opt": opt.state_dict()}, path)
        print("demo: epoch %d  %d samples  loss %.3f  %.1fs  -> %s"
              % (epoch, seen, total / max(seen, 1), time.monotonic() - t0, path), flush=True)
    print("demo: done; removing %s" % (work if created else data + ", " + ckpt), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
