"""Two ranks as two processes: each dispatches 64 tokens to their top-2 of 8 experts, runs an
identity "expert", combines, and checks what came back (CPU backend; no GPU needed).

    python examples/python/round_trip.py
"""
import multiprocessing

import numpy as np
import switchyard

NUM_RANKS, NUM_EXPERTS, TOPK, NUM_TOKENS, HIDDEN = 2, 8, 2, 64, 1024
BF16_ONE = 0x3F80  # numpy has no bf16: bf16 tensors are their bits, as uint16


def run_rank(rank, board, barrier, reports):
    def group(mine):  # allgather(bytes) -> list[bytes]; a torch.distributed group or mpi4py comm also works
        board[rank] = mine
        barrier.wait(timeout=60)  # a rank that died breaks the barrier instead of hanging its peers
        everything = [board[r] for r in range(NUM_RANKS)]
        barrier.wait(timeout=60)  # no rank starts the next allgather before every rank has read this one
        return everything

    buffer = switchyard.Buffer(group, rank=rank, backend="cpu", max_tokens_per_rank=NUM_TOKENS, hidden=HIDDEN,
                               topk=TOPK, num_experts=NUM_EXPERTS)  # collective
    tokens = np.arange(NUM_TOKENS)[:, None]
    x = np.full((NUM_TOKENS, HIDDEN), BF16_ONE, dtype=np.uint16)
    topk_idx = ((tokens * 7 + np.arange(TOPK) * 5 + rank) % NUM_EXPERTS).astype(np.int64)  # -1 = no expert
    topk_weights = np.full((NUM_TOKENS, TOPK), 0.5, dtype=np.float32)

    layout = buffer.get_dispatch_layout(topk_idx, num_experts=NUM_EXPERTS)
    recv = buffer.dispatch(x, topk_idx, topk_weights, num_experts=NUM_EXPERTS, layout=layout)
    # recv.recv_x: by source rank, then source token; recv.recv_topk_idx: local ids, -1 elsewhere
    y = recv.recv_x  # run this rank's experts here: one bf16 row out per row in
    out = buffer.combine(y, recv.handle, recv.recv_topk_weights)  # out.combined_x, out.combined_topk_weights
    cached = buffer.dispatch(x, handle=recv.handle)  # same routing, no layout

    # With the identity expert and x = 1.0, a token comes back as the number of ranks it visited.
    ranks_visited = np.array([len(set(experts)) for experts in topk_idx // (NUM_EXPERTS // NUM_RANKS)])
    combined = (out.combined_x.astype(np.uint32) << 16).view(np.float32)
    as_expected = int((combined == ranks_visited[:, None]).all(axis=1).sum())
    same_rows = np.array_equal(cached.recv_x, recv.recv_x)
    reports[rank] = (f"rank {rank}: received {recv.num_recv_tokens} tokens, the same again from the cached handle: "
                     f"{'yes' if same_rows else 'NO'}; {as_expected} of its {NUM_TOKENS} came back as expected")
    buffer.destroy()  # collective, before dropping the buffer
    if not same_rows or as_expected != NUM_TOKENS:
        raise SystemExit(1)


if __name__ == "__main__":
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        board, reports, barrier = manager.dict(), manager.dict(), manager.Barrier(NUM_RANKS)
        ranks = [context.Process(target=run_rank, args=(rank, board, barrier, reports)) for rank in range(NUM_RANKS)]
        for process in ranks:
            process.start()
        for process in ranks:
            process.join()
        for rank, process in enumerate(ranks):
            print(reports.get(rank, f"rank {rank}: failed (exit code {process.exitcode})"))
    raise SystemExit(0 if all(process.exitcode == 0 for process in ranks) else 1)
