"""nbgrader settings for the course.

nbgrader works in a course directory (source/<assignment>/, release/, submitted/, ...): copy
this file into yours. `python scripts/release.py` does that in a temporary directory to make
the student notebooks in exercises/ from the sources in solutions/.

In a student's notebook every check cell calls `autograder.notebook.check`, which grades in a
subprocess and returns the points earned as the cell's value. Under `nbgrader autograde` no
kernel runs the submission: `GradeInSandbox` (autograder/nbgrader_grading.py) takes the place of
nbgrader's Execute step and fills each check cell with the sandboxed grader's report and
points, which nbgrader takes as partial credit. A notebook cannot fool it by what it prints.
"""

from nbconvert.preprocessors import ClearMetadataPreprocessor, CSSHTMLHeaderPreprocessor
from nbgrader.preprocessors import (AssignLatePenalties, CheckCellMetadata, ClearHiddenTests, GetGrades, IgnorePattern,
                                   LimitOutput, SaveAutoGrades)

from autograder.nbgrader_grading import GradeInSandbox, feedback_template_dirs

c = get_config()  # noqa: F821 (nbgrader defines it when it loads this file)

c.CourseDirectory.course_id = "ddp-course"
# Each lesson is an assignment: "ps1" (solutions/01_parallelism.ipynb), "ps2" (solutions/02_ddp_basics.ipynb); see
# scripts/release.py. Name it on the command line, `nbgrader autograde ps2`. It is not set here as CourseDirectory.assignment_id,
# since nbgrader then refuses every command that names an assignment.

c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}

c.Autograde.autograde_preprocessors = [
    GradeInSandbox,  # instead of Execute: the submission runs only inside the grader's sandbox
    IgnorePattern,
    ClearMetadataPreprocessor,
    LimitOutput,
    SaveAutoGrades,
    AssignLatePenalties,
    CheckCellMetadata,
]
# Autograding refuses to run where the sandbox cannot (bubblewrap missing or not permitted).
# To grade anyway, with each submission running as you, beside the gradebook:
# c.GradeInSandbox.allow_without_sandbox = True
# Steps of hints a student took (their progress file, submitted beside the notebook) are shown in the report;
# they cost nothing unless you give each step a price in points, e.g.:
# c.GradeInSandbox.hint_cost = 0.5

# Feedback pages show the check cells as students had them: the hidden tests (grading again on other data)
# are graded, not shown.
c.GenerateFeedback.preprocessors = [GetGrades, ClearHiddenTests, CSSHTMLHeaderPreprocessor]
# Feedback pages list each check cell as its exercise ("Exercise 2.3"), not as nbgrader's "Test cell".
c.HTMLExporter.template_name = "course_feedback"
c.HTMLExporter.template_file = "course_feedback.html.j2"
c.HTMLExporter.extra_template_basedirs = feedback_template_dirs()

# A check cell grades its exercise at world sizes 1, 2 and 3, and gives up after 240 s
# (autograder.notebook.GRADE_LIMIT), so that it answers before the cell is cut off here.
c.Execute.timeout = 300
c.ExecutePreprocessor.timeout = 300
