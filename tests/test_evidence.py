"""The written audit of the checks (autograder/exercises/EVIDENCE.md) names every check once, as it is."""

from pathlib import Path

from autograder import exercises

TABLE = Path(__file__).resolve().parents[1] / "autograder" / "exercises" / "EVIDENCE.md"


def rows() -> list[tuple[str, str, str, str]]:
    found = []
    for line in TABLE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 4 and cells[0][:1].isdigit():
            found.append(tuple(cells))
    return found


def test_every_check_of_every_exercise_is_written_down_once_with_what_it_observes():
    checks = [(ex, c.name) for ex in exercises.ids() if exercises.kind(ex) != "answers"
              for c in exercises.get(ex).checks]
    written = [(ex, name) for ex, name, _, _ in rows()]
    assert sorted(written) == sorted(checks), (sorted(set(checks) - set(written)), sorted(set(written) - set(checks)))
    assert all(rests and len(observes) > 20 for _, _, rests, observes in rows())
