"""The lessons' predictions are read back beside the truth: agreeing, differing, or missing, each said so."""

from __future__ import annotations

from ddpcourse.predictions import agrees, beside


def test_numbers_agree_within_ten_percent_and_words_by_their_words():
    assert agrees(110, 100) and agrees(0.0, 0.0) and not agrees(120, 100)
    assert agrees(" Hang ", "hang") and not agrees("hang", "finish")
    assert agrees({"a": 3, "b": "fail"}, {"a": 3.2, "b": "FAIL"}) and not agrees({"a": 3}, {"a": 3, "b": 1})
    assert agrees([1, 2], (1, 2)) and not agrees([1], [1, 2]) and not agrees(1, True)


def test_a_guess_is_set_beside_the_truth_with_the_reason(capsys):
    text = beside(2, 4, "learning rate factor", why="the summed gradient is twice the mean")
    assert "you predicted 2, the run shows 4: they differ" in text
    assert text.endswith("Why: the summed gradient is twice the mean") and capsys.readouterr().out.strip() == text
    assert "they agree" in beside(4.1, 4, "learning rate factor")


def test_no_guess_is_said_and_the_truth_shown_anyway():
    text = beside({"x": None, "y": None}, {"x": 1, "y": 2}, "two numbers")
    assert "You wrote no prediction" in text and "{x: 1, y: 2}" in text
