#!/usr/bin/python3
"""dcnv2_torch.py: the PyTorch peer of the recsdk DCNv2 race (issue 26).

Trains the same model as samples/dcnv2 on the same bytes (the Criteo-format TSV that
`dcnv2 --mode=race` trains on, <data_dir>/train.tsv: label, 13 integer counts, 26 hex ids per
row, empty fields empty) and prints one JSON line shaped like `dcnv2 --mode=race`'s: samples/s
(median of timing windows after the warm-up), each window's rate, the first batch's loss and the
mean loss of steps (loss_steps-4..loss_steps].

Data as the sample's reader gives it (CriteoDataset, DenseTransform::kLog1p): dense =
log1p(max(count, 0)), an empty count 0; an empty id 0. The file is parsed before timing and
whole batches of --batch_size rows (512) are kept, the remainder dropped, cycled in order.

Model (the sample's defaults): all 26 fields in one table of sum_f (vocab_f + 1) rows x 8 (the
sample's keys field << 32 | id are rows offset_f + id here), nn.Embedding(sparse=True),
truncated normal(0, 0.05) cut at 2 stddev; the 13 dense features through BatchNorm1d(eps 1e-3,
momentum 0.01 = Keras' 0.99); x0 = [dense, embeddings] (221 wide); a DCNv2 cross network of 3
full-rank layers x_{l+1} = x0 * (x_l W + b) + x_l (W [221, 221] Xavier-uniform, b zeros) beside
a deep tower 221-256-128 (ReLU; Xavier-uniform weights, zero biases); one logit Linear(349, 1);
BCE with logits. Adam (lr 0.001, linear warm-up over the first 100 steps: the multiplier
(step + 1) / 100) for the dense variables and SparseAdam (lr 0.01, the LazyAdam of the sample:
only the rows a batch touches move) for the table, both behind the static loss scale 65536
(loss * scale backward, gradients / scale), as the sample. --cross low_rank --rank R builds
W = V U ([221, R], [R, 221]) instead, as the sample's --cross=low_rank.

Run it with OpenBLAS on its best kernels for this CPU, as scripts/race.sh does: OpenBLAS's own
detection where it knows the CPU; where it does not, it falls back to a pre-AVX2 kernel set
(Prescott, 2-3x slower products), so race.sh sets OPENBLAS_CORETYPE=SkylakeX (AVX-512) or Haswell
(AVX2) instead. The JSON's "blas" names the kernel set that ran:
  env -u OPENBLAS_L2_SIZE OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 dcnv2_torch.py --threads 2 ...
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

DENSE = 13
SPARSE = 26
DIM = 8


def field_vocabulary(f):
    """samples/dcnv2's FieldVocabulary: field f draws ids 1..vocab (0: empty)."""
    return 20 * (1 + f % 5) * (1 + f % 3)


def read_tsv(path, batch):
    counts, ids, labels = [], [], []
    with open(path) as f:
        for line in f:
            cols = line.rstrip("\n").split("\t")
            if len(cols) != 1 + DENSE + SPARSE:
                sys.exit(f"dcnv2_torch: {path}: a row with {len(cols)} fields, not 40")
            labels.append(float(cols[0]))
            counts.append([int(c) if c else -1 for c in cols[1:1 + DENSE]])
            ids.append([int(c, 16) if c else 0 for c in cols[1 + DENSE:]])
    n = len(labels) // batch * batch
    if n == 0:
        sys.exit(f"dcnv2_torch: {path} holds fewer than {batch} rows")
    dense = np.log1p(np.maximum(np.array(counts[:n], dtype=np.float64), 0)).astype(np.float32)
    vocab = [field_vocabulary(f) + 1 for f in range(SPARSE)]
    offsets = np.concatenate([[0], np.cumsum(vocab)[:-1]]).astype(np.int64)
    rows = np.array(ids[:n], dtype=np.int64)
    if (rows < 0).any() or (rows >= np.array(vocab)).any():
        sys.exit(f"dcnv2_torch: {path}: an id outside its field's vocabulary")
    rows += offsets
    label = np.array(labels[:n], dtype=np.float32).reshape(n, 1)
    batches = []
    for b in range(0, n, batch):
        batches.append((torch.from_numpy(rows[b:b + batch].copy()),
                        torch.from_numpy(dense[b:b + batch].copy()),
                        torch.from_numpy(label[b:b + batch].copy())))
    return batches, int(sum(vocab))


def linear(fan_in, units):
    lin = nn.Linear(fan_in, units)
    nn.init.xavier_uniform_(lin.weight)
    nn.init.zeros_(lin.bias)
    return lin


class CrossLayer(nn.Module):
    """x0 * (xl W + b) + xl, W full rank [d, d] or V U of rank r."""

    def __init__(self, d, rank):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(d))
        if rank > 0:
            self.kernel_v = nn.Parameter(nn.init.xavier_uniform_(torch.empty(d, rank)))
            self.kernel_u = nn.Parameter(nn.init.xavier_uniform_(torch.empty(rank, d)))
            self.kernel = None
        else:
            self.kernel = nn.Parameter(nn.init.xavier_uniform_(torch.empty(d, d)))

    def forward(self, x0, xl):
        if self.kernel is not None:
            y = torch.addmm(self.bias, xl, self.kernel)
        else:
            y = torch.addmm(self.bias, xl @ self.kernel_v, self.kernel_u)
        return x0 * y + xl


class Dcnv2(nn.Module):
    def __init__(self, rows, cross_layers, rank, deep_units):
        super().__init__()
        self.table = nn.Embedding(rows, DIM, sparse=True)
        nn.init.trunc_normal_(self.table.weight, 0.0, 0.05, -0.1, 0.1)
        self.norm = nn.BatchNorm1d(DENSE, eps=1e-3, momentum=0.01)
        d = DENSE + SPARSE * DIM
        self.cross = nn.ModuleList([CrossLayer(d, rank) for _ in range(cross_layers)])
        layers, width = [], d
        for units in deep_units:
            layers += [linear(width, units), nn.ReLU()]
            width = units
        self.deep = nn.Sequential(*layers)
        self.logits = linear(d + width, 1)

    def forward(self, ids, dense):
        emb = self.table(ids).reshape(ids.shape[0], SPARSE * DIM)
        x0 = torch.cat([self.norm(dense), emb], dim=1)
        x = x0
        for layer in self.cross:
            x = layer(x0, x)
        return self.logits(torch.cat([x, self.deep(x0)], dim=1))


def run(args, batches, rows):
    torch.manual_seed(17)
    model = Dcnv2(rows, args.cross_layers, args.rank if args.cross == "low_rank" else 0,
                  [int(u) for u in args.deep_units.split(",")])
    dense_params = [p for n, p in model.named_parameters() if not n.startswith("table.")]
    adam = torch.optim.Adam(dense_params, lr=args.dense_learning_rate,
                            foreach=args.foreach or None)
    sparse_adam = torch.optim.SparseAdam(list(model.table.parameters()),
                                         lr=args.sparse_learning_rate)
    loss_fn = nn.BCEWithLogitsLoss()
    inv_scale = 1.0 / args.loss_scale
    losses = []
    step = 0

    def train_step():
        nonlocal step
        ids, dense, labels = batches[step % len(batches)]
        if args.warmup_steps > 0:
            mult = min(1.0, (step + 1) / args.warmup_steps)
            for g in adam.param_groups:
                g["lr"] = args.dense_learning_rate * mult
        adam.zero_grad(set_to_none=True)
        sparse_adam.zero_grad(set_to_none=True)
        loss = loss_fn(model(ids, dense), labels)
        if args.loss_scale != 1:
            (loss * args.loss_scale).backward()
            for p in dense_params:
                p.grad.mul_(inv_scale)
            model.table.weight.grad.mul_(inv_scale)
        else:
            loss.backward()
        adam.step()
        sparse_adam.step()
        losses.append(float(loss))
        step += 1

    for _ in range(args.warmup):
        train_step()
    rates = []
    for _ in range(args.windows):
        t0 = time.perf_counter()
        for _ in range(args.window_steps):
            train_step()
        rates.append(args.window_steps * args.batch_size / (time.perf_counter() - t0))
    total = args.warmup + args.windows * args.window_steps
    loss_steps = args.loss_steps if args.loss_steps > 0 else total
    while len(losses) < loss_steps:
        train_step()
    tail = losses[max(0, loss_steps - 5):loss_steps]
    return rates, losses[0], loss_steps, sum(tail) / len(tail)


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


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default="dcnv2_data/train.tsv")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch_size", type=int, default=512)
    p.add_argument("--cross", choices=["full", "low_rank"], default="full")
    p.add_argument("--rank", type=int, default=32)
    p.add_argument("--cross_layers", type=int, default=3)
    p.add_argument("--deep_units", default="256,128")
    p.add_argument("--dense_learning_rate", type=float, default=0.001)
    p.add_argument("--sparse_learning_rate", type=float, default=0.01)
    p.add_argument("--warmup_steps", type=int, default=100)
    p.add_argument("--loss_scale", type=float, default=65536)
    # --foreach: Adam's multi-tensor path (torch 1.13 defaults to it on CUDA only).
    p.add_argument("--foreach", action="store_true")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--windows", type=int, default=5)
    p.add_argument("--window_steps", type=int, default=20)
    p.add_argument("--loss_steps", type=int, default=0)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    batches, rows = read_tsv(args.data, args.batch_size)
    rates, first, loss_steps, loss = run(args, batches, rows)
    print(json.dumps({
        "impl": "torch", "model": "dcnv2", "threads": args.threads,
        "optimizer": "adam+lazy_adam", "cross": args.cross, "batch": args.batch_size,
        "batches": len(batches), "samples_per_s": round(statistics.median(rates), 1),
        "windows": [round(r, 1) for r in rates], "first_loss": round(first, 6),
        "loss_steps": loss_steps, "loss": round(loss, 6), "torch": torch.__version__,
        "blas": blas_name()}))


if __name__ == "__main__":
    main()
