#!/usr/bin/env bash
# Turn nbgrader's instructor tools in this clone's JupyterLab on (the default) or off:
#
#   bash scripts/instructor.sh [on|off]
#
# The instructor tools are the formgrader, the course list, the "Create Assignment" cell toolbar
# and the notebook's Validate button. scripts/setup.sh turns them off, since students must not see
# them: Validate runs nbgrader's tests, which here are the hidden re-checks, takes seconds per
# exercise and tells an unstarted exercise as "passed some but not all of the tests", with no
# score; each exercise's check cell is the students' report. The assignment list stays on. The setting lives in .venv (--sys-prefix), so
# it belongs to this clone only, and a rerun of setup.sh keeps it. Restart JupyterLab to see it.
# Without .venv (a conda environment), it sets the active environment's jupyter.
set -euo pipefail
cd "$(dirname "$0")/.."
JUPYTER=.venv/bin/jupyter
[ -x "$JUPYTER" ] || JUPYTER=$(command -v jupyter) || {
  echo "instructor.sh: no .venv/bin/jupyter: run bash scripts/setup.sh first" >&2
  exit 1
}

LAB_PLUGINS=(@jupyter/nbgrader:formgrader @jupyter/nbgrader:course-list @jupyter/nbgrader:create-assignment
             @jupyter/nbgrader:validate-assignment)
SERVER_EXTENSIONS=(nbgrader.server_extensions.formgrader nbgrader.server_extensions.course_list
                   nbgrader.server_extensions.validate_assignment)
MARKER="$(dirname "$(dirname "$JUPYTER")")/.instructor-tools-on"  # in the environment; setup.sh reads it

# Run a jupyter command quietly: its log only if it fails.
jupyter_quiet() {
  local out
  out=$("$JUPYTER" "$@" 2>&1) || { printf '%s\n' "$out" >&2; echo "instructor.sh: jupyter $* failed" >&2; exit 1; }
}

case "${1:-on}" in
  on)
    jupyter_quiet labextension unlock --level=sys_prefix "${LAB_PLUGINS[@]}"
    jupyter_quiet labextension enable --level=sys_prefix "${LAB_PLUGINS[@]}"
    jupyter_quiet server extension enable --sys-prefix "${SERVER_EXTENSIONS[@]}"
    touch "$MARKER"
    echo "nbgrader's instructor tools are on in this environment's JupyterLab (formgrader, course list, Create Assignment, Validate)."
    echo "Restart JupyterLab to see them; bash scripts/instructor.sh off hides them again."
    ;;
  off)
    jupyter_quiet labextension disable --level=sys_prefix "${LAB_PLUGINS[@]}"
    # locked, so that JupyterLab's plugin manager cannot turn them back on from the browser
    jupyter_quiet labextension lock --level=sys_prefix "${LAB_PLUGINS[@]}"
    jupyter_quiet server extension disable --sys-prefix "${SERVER_EXTENSIONS[@]}"
    rm -f "$MARKER"
    echo "nbgrader's instructor tools are off in this environment's JupyterLab (as students get it); bash scripts/instructor.sh turns them on."
    ;;
  *)
    echo "usage: bash scripts/instructor.sh [on|off]" >&2
    exit 2
    ;;
esac
