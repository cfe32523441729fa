"""The exercise framework: placeholders are 'not attempted', wrong answers get a sentence, a crash is feedback."""
from __future__ import annotations

import pytest
import torch

from attnlib.exercises import Verdict, check, checker


@checker("test.causal")
def causal_6(answer):
    """A (6, 6) bool causal mask: the framework's own example, independent of any notebook's exercises."""
    right = torch.ones(6, 6, dtype=torch.bool).tril()
    if not isinstance(answer, torch.Tensor) or answer.shape != (6, 6):
        return False, "expected a tensor of shape (6, 6)"
    if answer.dtype != torch.bool:
        return False, f"expected dtype torch.bool, got {answer.dtype}"
    if torch.equal(answer, ~right):
        return False, "the polarity is inverted"
    if torch.equal(answer, right.T):
        return False, "this is the transpose"
    if torch.equal(answer, right.tril(-1)):
        return False, "the diagonal is masked"
    return torch.equal(answer, right), "correct" if torch.equal(answer, right) else "not the causal mask"


def test_placeholders_are_not_attempted(capsys):
    for placeholder in (None, ...):
        verdict = check("test.causal", placeholder)
        assert verdict.ok is None and not verdict
    assert "not attempted yet" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, says", [
    (~torch.ones(6, 6, dtype=torch.bool).tril(), "polarity"),
    (torch.ones(6, 6, dtype=torch.bool).triu(), "transpose"),
    (torch.ones(6, 6, dtype=torch.bool).tril(-1), "diagonal"),
    (torch.ones(6, 6).tril(), "dtype"),
    (torch.ones(5, 5, dtype=torch.bool).tril(), "shape"),
])
def test_the_causal_mask_checker_rejects_typical_mistakes(wrong, says):
    verdict = check("test.causal", wrong, quiet=True)
    assert verdict.ok is False and says in verdict.message


def test_the_right_answer_passes():
    assert check("test.causal", torch.ones(6, 6, dtype=torch.bool).tril(), quiet=True)


def test_an_answer_that_breaks_the_checker_is_feedback_not_a_crash():
    from attnlib.exercises import checker

    @checker("test.raises")
    def fragile(answer):
        return answer.shape == (6, 6), "never reached for an int"

    verdict = check("test.raises", 3, quiet=True)
    assert verdict.ok is False and "AttributeError" in verdict.message


def test_an_unknown_exercise_is_the_notebooks_bug():
    with pytest.raises(ValueError, match="no checker for exercise '99.9'"):
        check("99.9", 1)


def test_verdict_is_truthy_only_when_correct():
    assert Verdict("x", True, "")
    assert not Verdict("x", False, "")
    assert not Verdict("x", None, "")
