"""Feedback for the notebooks' exercises: ``check(exercise_id, answer)`` says in a sentence what is right or wrong.

Every exercise in the series is three cells:

1. the learner's attempt, shipped as a placeholder that runs (``answer = ...`` or ``None``);
2. ``check("10.2", answer)``, which prints "not attempted yet" for the placeholder, names what is
   wrong with a wrong answer, or says "correct"; it never raises, so the notebook keeps running;
3. the solution, collapsed by default, then ``assert check("10.2", solution)``, which CI runs.

The checkers live in one module per notebook (``attnlib/exercises/nb10.py`` holds ``"10.*"``),
each registered with :func:`checker`. A checker takes the answer (plus any keyword context the
notebook passes) and returns ``(ok, message)``, or stops early with :func:`require` (a sentence, or None when nothing is
wrong); any other exception it raises becomes feedback too.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

_CHECKERS: dict[str, Callable[..., tuple[bool, str]]] = {}

NOT_ATTEMPTED = "not attempted yet"


class NotYet(Exception):
    """Raised inside a checker to stop at the first thing that is wrong; its message is the feedback."""


def require(problem: str | None) -> None:
    """Stop the check with ``problem`` as the feedback, unless it is None (nothing wrong)."""
    if problem:
        raise NotYet(problem)


@dataclass(frozen=True)
class Verdict:
    """The outcome of a check. ``ok`` is True (correct), False (wrong) or None (not attempted yet).

    It is truthy only when correct, so a solution cell can ``assert check(...)``.
    """

    exercise: str
    ok: bool | None
    message: str

    def __bool__(self) -> bool:
        return self.ok is True

    def __str__(self) -> str:
        mark = {True: "correct", False: "not yet", None: "waiting"}[self.ok]
        return f"[{self.exercise}] {mark}: {self.message}"

    def _ipython_display_(self) -> None:  # check() already printed it; don't print it twice
        pass


def checker(exercise: str) -> Callable:
    """Register ``fn(answer, **context) -> (ok, message)`` as the checker of ``exercise`` (e.g. ``"10.2"``)."""

    def register(fn: Callable[..., tuple[bool, str]]) -> Callable[..., tuple[bool, str]]:
        if exercise in _CHECKERS:
            raise ValueError(f"exercise {exercise!r} already has a checker ({_CHECKERS[exercise].__name__})")
        _CHECKERS[exercise] = fn
        return fn

    return register


def _load(exercise: str) -> Callable[..., tuple[bool, str]]:
    if exercise not in _CHECKERS:
        notebook = exercise.split(".")[0]
        try:
            importlib.import_module(f"{__name__}.nb{int(notebook):02d}")
        except (ValueError, ModuleNotFoundError):
            pass
    if exercise not in _CHECKERS:
        known = ", ".join(sorted(_CHECKERS)) or "none loaded"
        raise ValueError(f"no checker for exercise {exercise!r}; known: {known}")
    return _CHECKERS[exercise]


def is_placeholder(answer: Any) -> bool:
    """True for the values the attempt cells ship with: ``None`` and ``...``."""
    return answer is None or answer is Ellipsis


def check(exercise: str, answer: Any, quiet: bool = False, **context: Any) -> Verdict:
    """Check ``answer`` for ``exercise``, print one sentence of feedback and return a :class:`Verdict`.

    Never raises for a wrong answer (an unknown exercise id is a ValueError: that is the
    notebook's bug, not the learner's). ``context`` is passed on to the checker.
    """
    fn = _load(exercise)
    if is_placeholder(answer):
        verdict = Verdict(exercise, None, NOT_ATTEMPTED + " (replace the placeholder, then run this cell again)")
    else:
        try:
            ok, message = fn(answer, **context)
            verdict = Verdict(exercise, bool(ok), message)
        except NotYet as wrong:
            verdict = Verdict(exercise, False, str(wrong))
        except Exception as error:  # the learner's answer broke the checker: that is feedback too
            verdict = Verdict(exercise, False, f"checking your answer raised {type(error).__name__}: {error}")
    if not quiet:
        print(verdict)
    return verdict
