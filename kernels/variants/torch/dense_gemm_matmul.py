"""dense_gemm in plain torch: matmul into a preallocated output, optionally split along N.

A torch variant calls the library (cuBLAS / oneDNN) by its language: it is ranked as such.
"""

import torch

CONFIG_SPACE = {"n_chunks": [1, 2, 4]}


def build(config, shape):
    n_chunks = int(config.get("n_chunks", 1))
    n = shape["N"]
    if n % n_chunks:
        raise ValueError(f"N={n} does not split into {n_chunks} chunks")
    step = n // n_chunks

    if n_chunks == 1:
        def run_whole(x, w, out):
            torch.matmul(x, w.t(), out=out)
        return run_whole

    def run(x, w, out):
        for i in range(n_chunks):
            sl = slice(i * step, (i + 1) * step)
            torch.matmul(x, w[sl].t(), out=out[:, sl])

    return run
