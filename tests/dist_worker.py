"""A tensor-parallel-style worker for tests/test_distributed.py: spawned like
SGLang's scheduler processes, one all-reduce per forward pass."""
import contextlib
import datetime
import os
import signal

import torch
import torch.distributed as dist

import sgl_shapeprof


def tp_worker(rank: int, world: int, init_file: str, env: dict, passes: int,
              die_rank: int = -1, die_in_pass: int = -1) -> None:
    os.environ.update(env)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    prof = sgl_shapeprof.from_env()  # rank: torch.distributed's, as in a TP worker
    torch.manual_seed(0)
    weight = torch.randn(16, 8 * (rank + 1))  # each rank's shard has its own shape
    for p in range(1, passes + 1):
        with prof.forward_pass("decode") if prof else contextlib.nullcontext():
            partial = torch.randn(4, 16) @ weight[:, :8]
            if rank == die_rank and p == die_in_pass:
                os.kill(os.getpid(), signal.SIGKILL)
            dist.all_reduce(partial)
            torch.relu(partial)
    dist.barrier()
    dist.destroy_process_group()
    if prof is not None:
        prof.close()
