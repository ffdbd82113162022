"""Ranks as processes (multiprocessing, spawn) joined by a pipe-based allgather.

Each rank is a persistent worker process; `Ranks.run(job, args_per_rank)` calls
job(rank, num_ranks, allgather, *args) on every rank and returns the results by rank. The parent
is the hub of every allgather: it collects one contribution per rank, then answers each with all
of them. A rank that fails makes the hub abort the others' pending allgathers, so a failure is
reported instead of hanging.
"""
import multiprocessing
import multiprocessing.connection
import traceback

JOB_TIMEOUT_SECONDS = 120  # generous for a loaded 2-core CI machine; a job takes well under 5 s


class RankFailed(RuntimeError):
    pass


def _worker(rank, num_ranks, conn):
    import switchyard  # noqa: F401  (imported once, before the first job)

    def allgather(mine):
        conn.send(("allgather", bytes(mine)))
        kind, payload = conn.recv()
        if kind == "abort":
            raise RankFailed(f"rank {rank}: allgather aborted: {payload}")
        return payload

    while True:
        message = conn.recv()
        if message is None:
            return
        job, args = message
        try:
            conn.send(("done", job(rank, num_ranks, allgather, *args)))
        except BaseException:  # noqa: BLE001 - report everything to the parent
            conn.send(("error", traceback.format_exc()))


class Ranks:
    def __init__(self, num_ranks):
        context = multiprocessing.get_context("spawn")
        self.num_ranks = num_ranks
        self.conns = []
        self.processes = []
        for rank in range(num_ranks):
            parent_end, child_end = context.Pipe()
            process = context.Process(target=_worker, args=(rank, num_ranks, child_end), daemon=True)
            process.start()
            child_end.close()
            self.conns.append(parent_end)
            self.processes.append(process)

    def run(self, job, args_per_rank=None):
        num_ranks = self.num_ranks
        args_per_rank = args_per_rank or [()] * num_ranks
        for conn, args in zip(self.conns, args_per_rank):
            conn.send((job, tuple(args)))
        results, errors = [None] * num_ranks, {}
        pending = set(range(num_ranks))
        gathered = {}
        while pending:
            ready = multiprocessing.connection.wait([self.conns[r] for r in pending if r not in gathered],
                                                    timeout=JOB_TIMEOUT_SECONDS)
            if not ready:
                raise RankFailed(f"ranks {sorted(pending)} did not answer within {JOB_TIMEOUT_SECONDS} s")
            for conn in ready:
                rank = self.conns.index(conn)
                try:
                    kind, payload = conn.recv()
                except (EOFError, OSError):  # the process died (or was killed) mid-job
                    self.processes[rank].join(timeout=5)
                    kind, payload = "error", f"the process died (exit code {self.processes[rank].exitcode})"
                if kind == "allgather":
                    gathered[rank] = payload
                else:
                    pending.discard(rank)
                    if kind == "done":
                        results[rank] = payload
                    else:
                        errors[rank] = payload
            if gathered and set(gathered) == pending:
                if len(gathered) == num_ranks:
                    everything = [gathered[r] for r in range(num_ranks)]
                    reply = ("all", everything)
                else:
                    reply = ("abort", f"ranks {sorted(errors)} failed")
                for rank in gathered:
                    self.conns[rank].send(reply)
                gathered = {}
        if errors:
            raise RankFailed("\n".join(f"--- rank {r} ---\n{errors[r]}" for r in sorted(errors)))
        return results

    def close(self):
        for conn in self.conns:
            try:
                conn.send(None)
            except OSError:
                pass
        for process in self.processes:
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
