#!/usr/bin/python3
"""dlrm_torch.py: the PyTorch peer of the recsdk DLRM race (issue 15).

Trains the same model as samples/dlrm on the same bytes (the binary file samples/dlrm writes; see
its header comment for the layout) and prints one JSON line shaped like samples/dlrm's:
samples/s (median of timing windows after the warm-up), each window's rate, the first batch's
loss and the mean loss of steps (loss_steps-4..loss_steps].

Model: nn.EmbeddingBag(1_000_000, 16, mode="sum", sparse=True) per table, uniform(-0.05, 0.05);
bottom MLP 13-512-256-16 and top MLP 367-512-256-1 (ReLU; Xavier-uniform weights, zero biases,
as recsdk's GlorotUniform/Zeros); the DLRM dot interaction (the 351 dots below the diagonal, in
the order i = 1..26, j = 0..i-1, then the dense vector first); BCE with logits; SGD or Adagrad
(initial_accumulator_value 0.1, eps 1e-10) for tables and dense alike, lr 0.01.

--mode little_demo races samples/little_demo's model on the same file, as samples/dlrm --mode
little_demo reads it (batch 512; user ids = the first 8 tables' ids mod 200,000, item ids = the
next 16 tables' mod 80,000, the file's label for both heads): EmbeddingBag(200_000, 32, sum) looked
up three times (1 + MULTI_LOOKUP_TIMES) and EmbeddingBag(80_000, 8, sum), truncated-normal(0.05)
rows, concatenated into an MLP 1024-512-256-128 (ReLU) and two logit heads, the two heads' BCE
summed; Adam (dense) and SparseAdam (tables), lr 0.01.

--mode embedding runs the embedding-only race: the 26 tables alone, lookup + pooled gradient
(the gradient of sum(out * w) for a fixed random w) + sparse Adagrad, reporting ids/s.

Run it with OpenBLAS on its best kernels for this CPU, as scripts/race.sh does: OpenBLAS's own
detection where it knows the CPU; where it does not, it falls back to a pre-AVX2 kernel set
(Prescott, 2-3x slower products), so race.sh sets OPENBLAS_CORETYPE=SkylakeX (AVX-512) or Haswell
(AVX2) instead. The JSON's "blas" names the kernel set that ran:
  env -u OPENBLAS_L2_SIZE OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 dlrm_torch.py --threads 2 ...
Single-threaded driver; torch uses --threads intra-op threads.
"""
import argparse
import ctypes
import json
import statistics
import sys
import time

import numpy as np
import torch
from torch import nn

MAGIC = 0x4D524C4452434552
TABLES = 26
DENSE = 13
DIM = 16


def read_data(path):
    header = np.fromfile(path, dtype=np.int64, count=8)
    if header[0] != MAGIC or header[3] != TABLES or header[4] != DENSE:
        sys.exit(f"dlrm_torch: {path} is not a samples/dlrm data file")
    num_batches, batch, vocab = int(header[1]), int(header[2]), int(header[5])
    per_batch = TABLES * batch * 8 + batch * DENSE * 4 + batch * 4
    raw = np.fromfile(path, dtype=np.uint8, offset=64)
    if raw.size != num_batches * per_batch:
        sys.exit(f"dlrm_torch: {path} is truncated")
    raw = raw.reshape(num_batches, per_batch)
    batches = []
    for b in range(num_batches):
        row = raw[b]
        o = 0
        ids = row[o:o + TABLES * batch * 8].view(np.int64).reshape(TABLES, batch)
        o += TABLES * batch * 8
        dense = row[o:o + batch * DENSE * 4].view(np.float32).reshape(batch, DENSE)
        o += batch * DENSE * 4
        labels = row[o:o + batch * 4].view(np.float32).reshape(batch, 1)
        batches.append((torch.from_numpy(ids.copy()), torch.from_numpy(dense.copy()),
                        torch.from_numpy(labels.copy())))
    return batches, batch, vocab


def mlp(sizes, relu_last):
    layers = []
    for i in range(len(sizes) - 1):
        lin = nn.Linear(sizes[i], sizes[i + 1])
        nn.init.xavier_uniform_(lin.weight)
        nn.init.zeros_(lin.bias)
        layers.append(lin)
        if i < len(sizes) - 2 or relu_last:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


class Dlrm(nn.Module):
    def __init__(self, vocab):
        super().__init__()
        self.tables = nn.ModuleList()
        for _ in range(TABLES):
            e = nn.EmbeddingBag(vocab, DIM, mode="sum", sparse=True)
            nn.init.uniform_(e.weight, -0.05, 0.05)
            self.tables.append(e)
        self.bottom = mlp([DENSE, 512, 256, DIM], relu_last=True)
        f = TABLES + 1
        self.top = mlp([DIM + f * (f - 1) // 2, 512, 256, 1], relu_last=False)
        li = [i for i in range(f) for j in range(i)]
        lj = [j for i in range(f) for j in range(i)]
        self.register_buffer("li", torch.tensor(li))
        self.register_buffer("lj", torch.tensor(lj))
        self.offsets = None

    def forward(self, ids, dense):
        batch = dense.shape[0]
        if self.offsets is None or self.offsets.shape[0] != batch:
            self.offsets = torch.arange(batch, dtype=torch.int64)
        x = self.bottom(dense)
        vecs = [x] + [t(ids[k], self.offsets) for k, t in enumerate(self.tables)]
        t = torch.stack(vecs, dim=1)  # [B, 27, 16]
        z = torch.bmm(t, t.transpose(1, 2))
        inter = z[:, self.li, self.lj]
        return self.top(torch.cat([x, inter], dim=1))


def optimizers(model, name, lr):
    sparse = list(model.tables.parameters())
    dense = list(model.bottom.parameters()) + list(model.top.parameters())
    if name == "sgd":
        return [torch.optim.SGD(dense, lr=lr), torch.optim.SGD(sparse, lr=lr)]
    return [torch.optim.Adagrad(dense, lr=lr, initial_accumulator_value=0.1, eps=1e-10),
            torch.optim.Adagrad(sparse, lr=lr, initial_accumulator_value=0.1, eps=1e-10)]


def run_dlrm(args, batches, batch, vocab):
    torch.manual_seed(17)
    model = Dlrm(vocab)
    opts = optimizers(model, args.optimizer, 0.01)
    loss_fn = nn.BCEWithLogitsLoss()
    losses = []
    step = 0

    def train_step():
        nonlocal step
        ids, dense, labels = batches[step % len(batches)]
        for o in opts:
            o.zero_grad(set_to_none=True)
        loss = loss_fn(model(ids, dense), labels)
        loss.backward()
        for o in opts:
            o.step()
        losses.append(float(loss))
        step += 1

    return measure(args, batch, train_step, losses)


def run_embedding(args, batches, batch, vocab):
    torch.manual_seed(17)
    tables = nn.ModuleList()
    for _ in range(TABLES):
        e = nn.EmbeddingBag(vocab, DIM, mode="sum", sparse=True)
        nn.init.uniform_(e.weight, -0.05, 0.05)
        tables.append(e)
    opt = torch.optim.Adagrad(tables.parameters(), lr=0.01, initial_accumulator_value=0.1,
                              eps=1e-10)
    offsets = torch.arange(batch, dtype=torch.int64)
    w = torch.randn(batch, DIM, generator=torch.Generator().manual_seed(5))
    losses = []
    step = 0

    def train_step():
        nonlocal step
        ids = batches[step % len(batches)][0]
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for k, t in enumerate(tables):
            out = t(ids[k], offsets)
            s = (out * w).sum()
            s.backward()
            total += float(s)
        opt.step()
        losses.append(total)
        step += 1

    return measure(args, batch * TABLES, train_step, losses)


DEMO_BATCH, DEMO_USER_IDS, DEMO_ITEM_IDS = 512, 8, 16
DEMO_USER_VOCAB, DEMO_ITEM_VOCAB = 200_000, 80_000


class LittleDemo(nn.Module):
    def __init__(self):
        super().__init__()
        self.user = nn.EmbeddingBag(DEMO_USER_VOCAB, 32, mode="sum", sparse=True)
        self.item = nn.EmbeddingBag(DEMO_ITEM_VOCAB, 8, mode="sum", sparse=True)
        for e in (self.user, self.item):
            nn.init.trunc_normal_(e.weight, 0.0, 0.05, -0.1, 0.1)
        layers, width = [], 32 * 3 + 8
        for units in (1024, 512, 256, 128):
            layers += [nn.Linear(width, units), nn.ReLU()]
            width = units
        self.tower = nn.Sequential(*layers)
        self.heads = nn.ModuleList([nn.Linear(128, 1) for _ in range(2)])
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)

    def forward(self, user_ids, item_ids):
        parts = [self.user(user_ids) for _ in range(3)] + [self.item(item_ids)]
        h = self.tower(torch.cat(parts, dim=1))
        return [head(h) for head in self.heads]


def run_little_demo(args, batches, batch, vocab):
    del vocab
    torch.manual_seed(17)
    model = LittleDemo()
    dense = list(model.tower.parameters()) + list(model.heads.parameters())
    opts = [torch.optim.Adam(dense, lr=0.01),
            torch.optim.SparseAdam(list(model.user.parameters()) + list(model.item.parameters()),
                                   lr=0.01)]
    loss_fn = nn.BCEWithLogitsLoss()
    steps = []
    for ids, _, labels in batches:
        for q in range(0, batch - DEMO_BATCH + 1, DEMO_BATCH):
            user = (ids[:DEMO_USER_IDS, q:q + DEMO_BATCH].t() % DEMO_USER_VOCAB).contiguous()
            item = (ids[DEMO_USER_IDS:DEMO_USER_IDS + DEMO_ITEM_IDS, q:q + DEMO_BATCH].t()
                    % DEMO_ITEM_VOCAB).contiguous()
            steps.append((user, item, labels[q:q + DEMO_BATCH].contiguous()))
    losses = []
    step = 0

    def train_step():
        nonlocal step
        user, item, label = steps[step % len(steps)]
        for o in opts:
            o.zero_grad(set_to_none=True)
        logits = model(user, item)
        loss = loss_fn(logits[0], label) + loss_fn(logits[1], label)
        loss.backward()
        for o in opts:
            o.step()
        losses.append(float(loss))
        step += 1

    return measure(args, DEMO_BATCH, train_step, losses)


def measure(args, per_step, train_step, losses):
    for _ in range(args.warmup):
        train_step()
    rates = []
    for _ in range(args.windows):
        t0 = time.perf_counter()
        for _ in range(args.window_steps):
            train_step()
        rates.append(args.window_steps * per_step / (time.perf_counter() - t0))
    total = args.warmup + args.windows * args.window_steps
    loss_steps = args.loss_steps if args.loss_steps > 0 else total
    while len(losses) < loss_steps:
        train_step()
    tail = losses[max(0, loss_steps - 5):loss_steps]
    return rates, losses[0], loss_steps, sum(tail) / len(tail)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="dlrm_data.bin")
    p.add_argument("--mode", choices=["dlrm", "embedding", "little_demo"], default="dlrm")
    # little_demo always trains with Adam + SparseAdam (the sample's optimizers).
    p.add_argument("--optimizer", choices=["sgd", "adagrad", "adam"], default="sgd")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--windows", type=int, default=3)
    p.add_argument("--window_steps", type=int, default=4)
    p.add_argument("--loss_steps", type=int, default=0)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    batches, batch, vocab = read_data(args.data)
    if args.mode == "dlrm":
        rates, first, loss_steps, loss = run_dlrm(args, batches, batch, vocab)
        rate_key = "samples_per_s"
    elif args.mode == "little_demo":
        rates, first, loss_steps, loss = run_little_demo(args, batches, batch, vocab)
        rate_key = "samples_per_s"
        batch = DEMO_BATCH
    else:
        rates, first, loss_steps, loss = run_embedding(args, batches, batch, vocab)
        rate_key = "ids_per_s"
    print(json.dumps({
        "impl": "torch", "model": args.mode, "threads": args.threads,
        "optimizer": {"dlrm": args.optimizer, "embedding": "adagrad", "little_demo": "adam"}[
            args.mode], "batch": batch,
        rate_key: round(statistics.median(rates), 1), "windows": [round(r, 1) for r in rates],
        "first_loss": round(first, 6), "loss_steps": loss_steps, "loss": round(loss, 6),
        "torch": torch.__version__, "blas": blas_name()}))


def blas_name():
    """The BLAS library this process has loaded (Debian's torch links whichever libblas.so.3
    the alternatives system selects)."""
    with open("/proc/self/maps") as maps:
        libs = {line.split()[-1] for line in maps if "blas" in line or "mkl" in line}
    for lib in sorted(libs):
        if "openblas" in lib:
            name = lib.rsplit("/", 2)[-2] + "/" + lib.rsplit("/", 1)[-1]
            try:  # the kernel set OpenBLAS picked (OPENBLAS_CORETYPE or its CPU detection)
                get_corename = ctypes.CDLL(lib).openblas_get_corename
                get_corename.restype = ctypes.c_char_p
                return f"{name} ({get_corename().decode()})"
            except (OSError, AttributeError):
                return name
    return ",".join(sorted(libs)) or "unknown"


if __name__ == "__main__":
    main()
