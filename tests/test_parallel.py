"""Tests of attnlib/parallel.py: forked runs give exactly the plain loop's results, the loop runs where forking is
not safe, and a failing or dying child is reported in the caller."""
import pytest
import torch

from attnlib import (AdditiveAttention, AttentionDecoder, Encoder, Seq2Seq, evaluate, make_reversal, seed_everything,
                     train_seq2seq)


def _train_one(seed: int) -> dict:
    """A tiny attention model trained from ``seed``: its final weights and its accuracy."""
    data = make_reversal(96, 5, seed=seed)
    seed_everything(seed)
    model = Seq2Seq(Encoder(13, 8, 16), AttentionDecoder(13, 8, 16, 16, AdditiveAttention(16, 16, 16)))
    train_seq2seq(model, data, epochs=2, lr=1e-2, batch_size=32, teacher_forcing=(1.0, 0.5, 0.5), seed=seed,
                  progress=False)
    return {"state": model.state_dict(), "acc": evaluate(model, data)}


def test_parallel_map_forks_and_gives_exactly_the_loops_results(monkeypatch):
    import os

    from attnlib import fork_is_safe, parallel_map

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert fork_is_safe()  # Linux, one thread, no CUDA: the forked path is the one tested here
        import time

        # a lambda (fn is never pickled) that takes long enough for the second worker to start and take a task
        pids = parallel_map(lambda _: (time.sleep(0.5), os.getpid())[1], range(4), progress=False)
        assert os.getpid() not in pids and len(set(pids)) == 2  # two worker processes did the work
        forked = parallel_map(_train_one, [0, 1, 2], progress=False)
        looped = parallel_map(_train_one, [0, 1, 2], workers=1, progress=False)
    finally:
        torch.set_num_threads(threads)
    assert [r["acc"] for r in forked] == [r["acc"] for r in looped]
    for f, l in zip(forked, looped):
        assert f["state"].keys() == l["state"].keys()
        assert all(torch.equal(f["state"][k], l["state"][k]) for k in f["state"])
    assert not torch.equal(forked[0]["state"]["encoder.embedding.weight"], forked[1]["state"]["encoder.embedding.weight"])


def test_parallel_map_falls_back_to_the_loop_where_forking_is_unsafe():
    import os

    from attnlib import fork_is_safe, parallel_map

    threads = torch.get_num_threads()
    torch.set_num_threads(2)  # an OpenMP pool may exist: no fork
    try:
        assert not fork_is_safe()
        assert parallel_map(lambda _: os.getpid(), range(3), progress=False) == [os.getpid()] * 3
    finally:
        torch.set_num_threads(threads)


def _fail_on_two(x: int) -> int:
    if x == 2:
        raise ZeroDivisionError("task two cannot be done")
    return x


def _die_on_one(x: int) -> int:
    import os

    if x == 1:
        os._exit(3)  # a crash without a Python exception (as a segfault or an OOM kill would be)
    return x


def test_parallel_map_errors_in_a_child_reach_the_caller():
    from attnlib import parallel_map

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        assert parallel_map(_fail_on_two, [0, 1], progress=False) == [0, 1]
        with pytest.raises(RuntimeError, match="task 2 .*failed in a worker process(.|\n)*ZeroDivisionError: task two"):
            parallel_map(_fail_on_two, [0, 1, 2, 3], progress=False)
        with pytest.raises(RuntimeError, match=r"without results for tasks \[1"):
            parallel_map(_die_on_one, [0, 1, 2, 3], progress=False)
        with pytest.raises(ValueError, match="workers must be at least 1, got 0"):
            parallel_map(_fail_on_two, [0], workers=0)
    finally:
        torch.set_num_threads(threads)
