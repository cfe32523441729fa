"""Independent runs (one per seed or per setting) on both cores: :func:`parallel_map`.

Every notebook trains on one thread, so on a two-core machine one core would idle while the
seeds of a comparison train one after the other. ``parallel_map`` runs them in forked worker
processes where that is safe (:func:`fork_is_safe`) and as a plain loop everywhere else, with
exactly the same results either way.
"""
from __future__ import annotations

from typing import Sequence

import torch

from .runtime import progress_bar

__all__ = ["fork_is_safe", "parallel_map"]


def fork_is_safe() -> bool:
    """True where :func:`parallel_map` may fork: Linux-like systems, torch on one thread, no CUDA.

    macOS and Windows have no safe ``fork`` (Python starts processes there by ``spawn``, which
    cannot run a function defined in a notebook). Torch with more than one thread may have an
    OpenMP pool running, and a forked child of such a process can hang in it; CUDA cannot be forked.
    """
    import multiprocessing as mp
    import sys

    return (sys.platform.startswith("linux") and "fork" in mp.get_all_start_methods()
            and torch.get_num_threads() == 1 and not torch.cuda.is_initialized())


def _next_index(counter, n: int):
    """Take the next task index from the shared counter (None when every task is taken)."""
    with counter.get_lock():
        i = counter.value
        if i >= n:
            return None
        counter.value = i + 1
    return i


def _worker(fn, tasks, counter, conn) -> None:
    """Child process: take the next untaken task, run ``fn`` on it, send back (index, ok, result); repeat."""
    import pickle
    import traceback

    while (i := _next_index(counter, len(tasks))) is not None:
        try:  # plain pickle: multiprocessing's own would share tensors through files that die with the child
            message = pickle.dumps((i, True, fn(tasks[i])))
        except BaseException:  # noqa: BLE001: every failure goes back to the parent as text
            message = pickle.dumps((i, False, traceback.format_exc()))
        conn.send_bytes(message)
    conn.close()


def parallel_map(fn, tasks: Sequence, workers: int = 2, desc: str | None = None, progress: bool = True) -> list:
    """``[fn(task) for task in tasks]``, computed in ``workers`` forked processes; results in order.

    Made for independent training runs (one per seed or per setting) on a machine whose cores
    would otherwise idle: every notebook trains on one thread. A worker that finishes a task takes
    the next one nobody has started (a shared queue, in the order given: put the longest tasks
    first), so an uneven mix of tasks keeps both cores busy; each result is sent back
    (results are pickled: tensors, dicts, floats and models of importable classes travel fine).
    ``fn`` itself is never pickled, because a forked child already has it, so a function defined
    in a notebook works. ``fn`` must seed everything it draws (``seed_everything`` inside it):
    then the results are exactly those of the plain loop, which is what runs where forking is
    not safe (:func:`fork_is_safe`), with ``workers=1`` or for a single task. An exception in a
    child is raised here as a RuntimeError carrying the child's traceback. Children should not
    print: their output does not reach the notebook. The progress bar counts finished tasks.
    """
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    tasks = list(tasks)
    bar = progress_bar(total=len(tasks), desc=desc or "runs", disable=not progress)
    if workers == 1 or len(tasks) < 2 or not fork_is_safe():
        results = []
        for task in tasks:
            results.append(fn(task))
            bar.update(1)
        bar.close()
        return results

    import multiprocessing as mp
    import pickle
    from multiprocessing.connection import wait

    ctx = mp.get_context("fork")
    counter = ctx.Value("i", 0)  # the index of the next task nobody has started
    pipes, procs = [], []
    for w in range(min(workers, len(tasks))):
        receive, send = ctx.Pipe(duplex=False)
        proc = ctx.Process(target=_worker, args=(fn, tasks, counter, send), daemon=True)
        proc.start()
        send.close()  # the parent keeps only the receiving end
        pipes.append(receive)
        procs.append(proc)
    results, failure = {}, None
    try:
        open_pipes = list(pipes)
        while open_pipes and failure is None:
            for conn in wait(open_pipes):
                try:
                    i, ok, value = pickle.loads(conn.recv_bytes())
                except EOFError:  # the child finished, or died without a word
                    open_pipes.remove(conn)
                    continue
                if not ok:
                    failure = f"task {i} ({tasks[i]!r}) failed in a worker process:\n{value}"
                    break
                results[i] = value
                bar.update(1)
    finally:
        for proc in procs:
            if failure is not None:
                proc.terminate()
            proc.join()
        for conn in pipes:
            conn.close()
        bar.close()
    if failure is not None:
        raise RuntimeError(failure)
    missing = [i for i in range(len(tasks)) if i not in results]
    if missing:
        codes = [proc.exitcode for proc in procs]
        raise RuntimeError(f"worker processes ended without results for tasks {missing} (exit codes {codes})")
    return [results[i] for i in range(len(tasks))]
