"""The two collectives the context-parallel algorithms need, over torch.distributed.

A communicator has `rank`, `world` and:
  shift(tensors) -> Pending: send each tensor to rank + 1 and receive its counterpart from
      rank - 1 (a ring hop); Pending.wait() returns the received tensors. The transfer is
      started at the call, so the caller computes between shift() and wait().
  all_to_all(chunks) -> list: chunks[j] goes to rank j; result[j] came from rank j.
  all_gather(tensor) -> list: result[j] is rank j's tensor (the same shape on every rank).
Every rank must make the same calls in the same order (they are collectives).
hfa.distributed.emulated has a second implementation that runs all ranks in one process.
"""

import torch
import torch.distributed as dist


class Pending:
    """Received tensors of a shift, valid after wait(); the sent ones are kept alive until then
    (NCCL reads them asynchronously)."""

    def __init__(self, requests, received, keep_alive=()):
        self._requests = requests
        self._received = received
        self._keep_alive = keep_alive

    def wait(self):
        for request in self._requests:
            request.wait()  # with NCCL: the current stream waits for the transfer
        self._requests, self._keep_alive = (), ()
        return self._received


class TorchComm:
    """A process group of torch.distributed (NCCL on GPUs). Transfers run on NCCL's own stream,
    so a hop's transfer overlaps the attention launched between shift() and wait() on the
    current stream."""

    def __init__(self, group=None):
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("group: torch.distributed is not initialized; call "
                               "torch.distributed.init_process_group first (or use "
                               "hfa.distributed.emulated to run several ranks in one process)")
        self.group = group
        self.rank = dist.get_rank(group)
        if self.rank < 0:
            raise ValueError("group: this process is not a member of the group")
        self.world = dist.get_world_size(group)
        whole = group if group is not None else dist.group.WORLD
        # P2POp takes global ranks.
        self._next = dist.get_global_rank(whole, (self.rank + 1) % self.world)
        self._prev = dist.get_global_rank(whole, (self.rank - 1) % self.world)

    def shift(self, tensors):
        tensors = [t.contiguous() for t in tensors]
        received = [torch.empty_like(t) for t in tensors]
        ops = [dist.P2POp(dist.isend, t, self._next, self.group) for t in tensors]
        ops += [dist.P2POp(dist.irecv, r, self._prev, self.group) for r in received]
        return Pending(dist.batch_isend_irecv(ops), received, tensors)

    def all_to_all(self, chunks):
        chunks = [c.contiguous() for c in chunks]
        received = [torch.empty_like(c) for c in chunks]
        dist.all_to_all(received, chunks, group=self.group)
        return received

    def all_gather(self, tensor):
        tensor = tensor.contiguous()
        received = [torch.empty_like(tensor) for _ in range(self.world)]
        dist.all_gather(received, tensor, group=self.group)
        return received


def communicator(group):
    """The communicator for `group`: a torch.distributed ProcessGroup or None (the default
    group); an object that already has shift/all_to_all/all_gather (an emulated rank) is used as
    is."""
    if all(hasattr(group, name) for name in ("shift", "all_to_all", "all_gather")):
        return group
    return TorchComm(group)
