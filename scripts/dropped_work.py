"""What the runtime still holds of dropped work: COUNT all-reduces of 16 KiB-1 MiB are submitted
and their handles dropped at once, then one barrier; each rank prints how many MiB of those
buffers are still alive (the runtime holds a buffer until its request completes, and should let
go of it then, not at some later sweep).

    mpiexec -n 3 python scripts/dropped_work.py [COUNT]
"""
import gc
import sys
import weakref

import numpy as np

import hvlite as hvd


def main(count):
    hvd.init()
    sizes = np.random.default_rng(0).integers(16 << 10, 1 << 20, size=count) // 4
    refs = []
    for i, n in enumerate(sizes):
        x = np.ones(int(n), np.float32)
        refs.append((weakref.ref(x), x.nbytes))
        hvd.allreduce_async_(x, op=hvd.Sum, name=f"dropped.{i}")
        del x
    hvd.barrier()
    gc.collect()
    alive = sum(nbytes for ref, nbytes in refs if ref() is not None)
    print(f"rank {hvd.rank()}: {count} dropped all-reduces ({sum(b for _, b in refs) / 2**20:.0f} "
          f"MiB), still alive after the barrier: {alive / 2**20:.1f} MiB", flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3000)
