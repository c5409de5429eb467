#!/usr/bin/env python3
"""The scaling model of a sharded table's exchange (docs/distributed.md, "Scaling model").

Projects the per-step exchange of a model's sharded tables from 8 to 1024 ranks on 100 and
400 Gb/s networks, from what scripts/dist_figures.sh measures on one host:
  - the bytes a step moves, the model below, which BM_StepBytes checks against the communicator's
    own count (bytes_vs_estimate 1.00005 at 2 ranks, 1.00075 at 4);
  - table_ns_per_key: the table work of a distributed lookup per unique key and rank (the layout
    by owner, the owners' union, resolve and gather, the answers read back), one core;
  - alltoall_vs_mpi: our exchange against raw MPI of the same bytes (about 1 on this host), so the
    model charges the wire time of the bytes and no overhead of ours on top;
  - the rounds: a step makes 3 exchanges (keys out, rows back, gradients out), 6 message rounds
    (a header round each, whose headers also carry the counts where the receiver does not know
    them, and a data round each), each round one message to every other rank;
  - round_us: our exchange's cost per round between ranks of this host (its 16-key case).
and from two network constants the host cannot measure (flags): the latency of a round and the
software cost per peer per round.

Per rank and step, with G the global batch, N ranks, b = G / N samples per rank, T tables of
dim d with h ids per sample each, and U(n) the expected unique ids among n draws of a table's
id distribution:
  keys   K = T U(b h)                                    (unique ids per rank and table, summed)
  bytes  S = K (N - 1) / N (24 + 8 (d + 1)) + 2 * 8 (N - 1) + 3 * 144 (N - 1)
         (24-byte key records out, (d + 1) floats back with the rows and again with the
         gradients; 8 bytes of counts per peer for the 2 exchanges whose receivers learn them,
         keys and gradients; a 144-byte header per peer for each of the 3 exchanges)
  time   t = S / bandwidth + 6 (latency + (N - 1) per_peer) + K table_ns_per_key
The ids follow Zipf(s) over V ids per table, as in dist_bench.cc; U(n) is exact for that:
  U(n) = sum_k 1 - (1 - p_k)^n.

Usage: python3 scripts/dist_scaling_model.py [--table_ns_per_key 50] [--dim 128] ...
Prints a markdown table; the last line names the rank count where the exchange stops getting
faster on each network.
"""
import argparse
import math


def zipf_buckets(vocab, s):
    """(count, probability) pairs covering Zipf(s) over `vocab` ids: the first 10k ids one by
    one, then geometric buckets of ids whose probabilities differ by under 0.1% within each (so
    1 - (1 - p)^n is all but constant inside a bucket)."""
    weight = lambda k: 1.0 / math.pow(k, s)
    buckets = []
    k = 1
    while k <= min(vocab, 10_000):
        buckets.append((1, weight(k)))
        k += 1
    while k <= vocab:
        end = min(vocab, max(k, int(k * 1.001)))
        count = end - k + 1
        buckets.append((count, weight((k + end) / 2.0)))
        k = end + 1
    total = sum(c * w for c, w in buckets)
    return [(c, w / total) for c, w in buckets]


def unique_ids(draws, buckets):
    """Expected distinct ids among `draws` draws: sum over ids of 1 - (1 - p)^draws."""
    return sum(-c * math.expm1(draws * math.log1p(-p)) for c, p in buckets)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--global_batch", type=int, default=65536,
                    help="fixed global batch (strong scaling)")
    ap.add_argument("--per_rank_batch", type=int, default=0,
                    help="if set: a fixed batch per rank, the global batch growing with the ranks")
    ap.add_argument("--tables", type=int, default=26)
    ap.add_argument("--ids_per_sample", type=int, default=1, help="h: ids per sample per table")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--vocab", type=int, default=10_000_000, help="ids per table")
    ap.add_argument("--zipf", type=float, default=1.05)
    ap.add_argument("--table_ns_per_key", type=float, default=50.0,
                    help="measured: dist_figures.sh's table_ns_per_key")
    ap.add_argument("--latency_us", type=float, default=2.0,
                    help="assumed: one message round's latency on the network")
    ap.add_argument("--per_peer_us", type=float, default=0.3,
                    help="assumed: software cost per peer per round (post, match, complete)")
    ap.add_argument("--networks_gbps", type=str, default="100,400")
    ap.add_argument("--ranks", type=str, default="8,16,32,64,128,256,512,1024")
    a = ap.parse_args()

    networks = [float(x) for x in a.networks_gbps.split(",")]
    buckets = zipf_buckets(a.vocab, a.zipf)
    rounds = 6
    record = 24 + 8 * (a.dim + 1)
    batch = (f"{a.per_rank_batch} samples per rank" if a.per_rank_batch > 0 else
             f"global batch {a.global_batch}")
    print(f"{batch}, {a.tables} tables x {a.ids_per_sample} ids of dim "
          f"{a.dim}, Zipf({a.zipf}) over {a.vocab} ids; table work {a.table_ns_per_key} ns/key; "
          f"round latency {a.latency_us} us + {a.per_peer_us} us per peer")
    head = "| ranks | samples/rank | unique ids/rank | MB/rank/step | rounds ms | table ms |"
    head += "".join(f" wire ms {g:g}G | exchange ms {g:g}G | M samples/s {g:g}G |"
                    for g in networks)
    print(head)
    print("|" + "---|" * (6 + 3 * len(networks)))
    best = {g: (None, float("inf")) for g in networks}
    rates = {g: [] for g in networks}
    for n in [int(x) for x in a.ranks.split(",")]:
        b = a.per_rank_batch if a.per_rank_batch > 0 else a.global_batch / n
        k = a.tables * unique_ids(b * a.ids_per_sample, buckets)
        s = k * (n - 1) / n * record + 2 * 8 * (n - 1) + 3 * 144 * (n - 1)
        t_rounds = rounds * (a.latency_us + (n - 1) * a.per_peer_us) * 1e-3
        t_table = k * a.table_ns_per_key * 1e-6
        row = f"| {n} | {b:.0f} | {k:,.0f} | {s / 1e6:.2f} | {t_rounds:.2f} | {t_table:.2f} |"
        for g in networks:
            wire = s / (g * 1e9 / 8) * 1e3
            step = wire + t_rounds + t_table
            if step < best[g][1]:
                best[g] = (n, step)
            rate = n * b / step * 1e-3  # millions of samples per second the exchange allows
            rates[g].append((n, rate))
            row += f" {wire:.2f} | {step:.2f} | {rate:.1f} |"
        print(row)
    if a.per_rank_batch > 0:
        # Weak scaling: how much of the ideal (linear in ranks) the last row keeps.
        print(" ".join(
            f"efficiency_at_{rates[g][-1][0]}_ranks_{g:g}G="
            f"{rates[g][-1][1] / rates[g][0][1] * rates[g][0][0] / rates[g][-1][0]:.2f}"
            for g in networks))
    else:
        print(" ".join(f"fastest_exchange_at_{g:g}G={best[g][0]} ({best[g][1]:.2f} ms)"
                       for g in networks))


if __name__ == "__main__":
    main()
