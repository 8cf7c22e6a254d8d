#!/usr/bin/env bash
# Create .venv with the course and its tools, and get bwrap for the grader's sandbox.
#
#   bash scripts/setup.sh           (again at any time: it only adds what is missing)
#
# torch goes in first, on its own: scripts/choose_torch.py picks the build for this machine
# (the CPU build without an NVIDIA GPU, the CUDA build with one) and says why, so that the
# course's own `pip install -e .` then finds torch satisfied instead of resolving a multi-GB
# CUDA build. TORCH_BUILD=cpu|cuda|default, TORCH_VERSION and TORCH_INDEX_URL override it.
# PYTHON picks the interpreter for .venv (default: python3).
set -euo pipefail

say() { printf 'setup: %s\n' "$*"; }

# pip install, with one short line per package it collects instead of pip's whole log.
# pip's warnings and errors go to stderr, untouched; pipefail keeps pip's exit status.
pip_install() {
  .venv/bin/python -m pip install "$@" | awk '
    /^(Collecting|Processing) / { sub(".*/", "", $2); print "  " $2; fflush(); n++ }
    /^Successfully installed/   { print "  installed " NF - 2 (NF == 3 ? " package" : " packages"); fflush(); n++ }
    END                         { if (!n) print "  already installed" }'
}

make_venv() {
  [ -x .venv/bin/python ] && return
  local python="${PYTHON:-python3}"
  "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || {
    say "the course needs Python 3.10 or later, and $python is $("$python" --version 2>&1): set PYTHON, e.g. PYTHON=python3.11 bash scripts/setup.sh"
    exit 1
  }
  say "creating .venv with $("$python" --version 2>&1) ($(command -v "$python"))"
  "$python" -m venv .venv
}

install_torch() {
  local why chosen arg
  why=$(mktemp)
  chosen=$(.venv/bin/python scripts/choose_torch.py 2>"$why") || { cat "$why" >&2; rm -f "$why"; exit 2; }
  say "installing $(cat "$why")"
  rm -f "$why"
  TORCH_ARGS=()
  while IFS= read -r arg; do TORCH_ARGS+=("$arg"); done <<<"$chosen"
  pip_install "${TORCH_ARGS[@]}"
}

install_course() {
  say "installing the course in editable mode, with JupyterLab, nbgrader, pytest and playwright (about a minute)"
  # The course is a flat layout whose packages are picked by [tool.setuptools.packages.find], so
  # setuptools makes the editable install an import hook and says, as a BuildBackendWarning, that a
  # folder named like a package in the working directory may shadow it. Here those folders *are*
  # the packages, so the notice says nothing: that one message alone is filtered.
  PYTHONWARNINGS="ignore:Editable installation:UserWarning" pip_install -e ".[test]"
}

# Students get JupyterLab without nbgrader's instructor tools; an instructor who turned them on
# (bash scripts/instructor.sh) keeps them through a rerun.
student_jupyterlab() {
  if [ -e .venv/.instructor-tools-on ]; then
    say "nbgrader's instructor tools stay on in JupyterLab (bash scripts/instructor.sh off hides them)"
  else
    say "hiding nbgrader's instructor tools from JupyterLab (bash scripts/instructor.sh shows them)"
    bash scripts/instructor.sh off >/dev/null
  fi
}

# The grader runs submissions in a bubblewrap sandbox. Install it when we can; never fail for it.
ensure_bwrap() {
  command -v bwrap >/dev/null && return 0
  if [ "$(uname -s)" != Linux ]; then
    say "no bwrap: bubblewrap, the grader's sandbox, runs on Linux only"
  elif [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    say "installing bubblewrap (bwrap, the grader's sandbox) with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q bubblewrap >/dev/null 2>&1 ||
      { apt-get update -q >/dev/null && apt-get install -y -q bubblewrap >/dev/null; } ||
      say "could not install bubblewrap with apt-get: the grader's sandbox needs bwrap"
  else
    say "no bwrap: the grader's sandbox needs it; install it as root: apt-get install bubblewrap (Debian, Ubuntu) or dnf install bubblewrap (Fedora)"
  fi
  return 0
}

main() {
  cd "$(dirname "${BASH_SOURCE[0]}")/.."
  make_venv
  say "upgrading pip"
  pip_install --upgrade pip
  install_torch
  install_course
  student_jupyterlab
  ensure_bwrap
  say "done: use .venv/bin/python and .venv/bin/jupyter (no need to activate .venv), e.g. .venv/bin/jupyter lab"
}

# Sourced (by tests/test_setup.py), it only defines the functions.
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  main "$@"
fi
