"""PyTorch twin of `transformer bench matmul`: f32 GFLOP/s of torch.matmul at the same shapes."""
import argparse
import os
import time

import torch

SHAPES = [  # (m, n, k, transpose a, transpose b, what)
    (512, 512, 512, False, False, "square 512"),
    (1024, 1024, 1024, False, False, "square 1024"),
    (2048, 2048, 2048, False, False, "square 2048"),
    (2048, 1536, 512, False, True, "QKV fwd  X·Wᵀ"),
    (2048, 2048, 512, False, True, "FFN1 fwd X·W1ᵀ"),
    (2048, 512, 2048, False, True, "FFN2 fwd H·W2ᵀ"),
    (2048, 8000, 512, False, True, "logits   H·Eᵀ"),
    (2048, 512, 8000, False, False, "dlogits·E"),
    (8000, 512, 2048, True, False, "dE = dlogitsᵀ·H"),
    (2048, 512, 2048, True, False, "dW1 = dHᵀ·X"),
    (512, 2048, 2048, True, False, "dW2 = dYᵀ·H"),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    for m, n, k, ta, tb, what in SHAPES:
        a = torch.rand(k, m) - 0.5 if ta else torch.rand(m, k) - 0.5
        b = torch.rand(n, k) - 0.5 if tb else torch.rand(k, n) - 0.5
        a_op = a.t() if ta else a
        b_op = b.t() if tb else b
        c = torch.empty(m, n)
        times = []
        for _ in range(args.reps + 1):
            t0 = time.perf_counter()
            torch.matmul(a_op, b_op, out=c)
            times.append(time.perf_counter() - t0)
        times = sorted(times[1:])
        med = times[len(times) // 2]
        ops = ("T" if ta else "N") + ("T" if tb else "N")
        print(f"{what:<18} {m:>5}x{n:>5}x{k:>5} {ops}  {med * 1e3:>7.2f} ms  {2 * m * n * k / med / 1e9:>6.1f} GFLOP/s")


if __name__ == "__main__":
    main()
