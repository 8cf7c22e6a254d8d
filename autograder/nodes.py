"""Launch commands a student writes for several machines (exercise 4.3), read without running them.

The exercise cell is the training script, and it names how it is started on each machine:

    NODE_COMMANDS = [
        "torchrun --nnodes=2 ... --rdzv-endpoint=$HEAD:$PORT --rdzv-id=$JOB_ID train.py",  # machine 0
        "torchrun --nnodes=2 ... train.py",                                                # machine 1
    ]

The grader reads that list from the cell's syntax tree (no student code runs in the grader), sets
$HEAD, $PORT and $JOB_ID as a cluster's batch script would, parses each command with torchrun's own
argument parser, and runs each as one agent of one job (jobs.Job, one entry of ``agents`` per
machine): the options are the student's, the entry point is the grader's worker, the script is
the cell.
"""

from __future__ import annotations

import ast
import contextlib
import io
import re
import shlex
from dataclasses import dataclass

NAME = "NODE_COMMANDS"
SCRIPT = "train.py"
VARIABLES = ("HEAD", "PORT", "JOB_ID")
_VARIABLE = re.compile(r"\$(\w+)|\$\{(\w+)\}")
_LAUNCHERS = (["torchrun"], ["python", "-m", "torch.distributed.run"], ["python3", "-m", "torch.distributed.run"])
# Options that would run something other than the script under the grader's worker.
_REFUSED = {"no_python": "--no-python", "module": "-m/--module", "run_path": "--run-path"}


class CommandError(Exception):
    """The commands cannot be run as written: the message says what to change."""


@dataclass(frozen=True)
class Node:
    """One machine's command, as torchrun reads it."""

    index: int
    command: str  # as the student wrote it, variables set
    options: tuple[str, ...]  # torchrun's options, before the script
    script_args: tuple[str, ...]
    parsed: dict  # torchrun's parsed arguments (plain values)

    def get(self, name: str):
        return self.parsed.get(name)

    @property
    def rendezvous(self) -> str:
        """"c10d", "static", ...: the backend torchrun uses for this command."""
        if self.get("standalone"):
            return "standalone"
        return self.get("rdzv_backend") or "static"

    @property
    def endpoint(self) -> str:
        """Where the agents meet, as torchrun takes it (run.get_rdzv_endpoint): the static rendezvous reads
        --master-addr:--master-port where no --rdzv-endpoint is given."""
        if self.rendezvous == "static" and not self.get("rdzv_endpoint"):
            return f"{self.get('master_addr')}:{self.get('master_port')}"
        return self.get("rdzv_endpoint") or ""


def written(code: str, machines: int) -> list[str]:
    """The commands in the cell, as written: a literal list of ``machines`` strings."""
    from autograder.source import parse

    try:
        tree = parse(code)
    except SyntaxError:
        raise CommandError("the cell does not parse; fix the syntax error first") from None
    found = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == NAME for t in node.targets):
            found = node.value
    if found is None:
        raise CommandError(f"the cell defines no {NAME}: a list of {machines} command lines, one per machine")
    try:
        value = ast.literal_eval(found)
    except ValueError:
        raise CommandError(f"{NAME} must be written out as a list of strings (no names, calls or f-strings: the "
                           "grader reads it without running your code)") from None
    if not isinstance(value, (list, tuple)) or len(value) != machines or not all(isinstance(c, str) for c in value):
        raise CommandError(f"{NAME} must be a list of {machines} strings, one command line per machine")
    return list(value)


def expand(command: str, values: dict[str, str]) -> str:
    """$NAME and ${NAME} set as a shell would, for the variables the exercise gives; any other is an error."""
    def one(match):
        name = match.group(1) or match.group(2)
        if name not in values:
            raise CommandError(f"${name} is not set on the machines: only {', '.join('$' + v for v in values)} are")
        return values[name]

    return _VARIABLE.sub(one, command)


def parse(index: int, command: str) -> Node:
    """One machine's command, read by torchrun's parser."""
    from torch.distributed.run import get_args_parser

    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise CommandError(f"machine {index}'s command cannot be split into words: {exc}") from None
    launcher = next((len(l) for l in _LAUNCHERS if words[:len(l)] == l), None)
    if launcher is None:
        raise CommandError(f"machine {index}'s command must start with `torchrun`: it starts with "
                           f"{' '.join(words[:2]) or 'nothing'!r}")
    argv = words[launcher:]
    parser = get_args_parser()
    parser.exit_on_error = False
    said = io.StringIO()
    try:  # what argparse prints (--help, an error) is the command's, never the grader's output
        with contextlib.redirect_stdout(said), contextlib.redirect_stderr(said):
            args = parser.parse_args(argv)
    except (Exception, SystemExit) as exc:  # argparse exits on some errors even when told not to
        why = "it asks for torchrun's help, which runs nothing" if isinstance(exc, SystemExit) and not exc.code \
            else str(exc) or " ".join(said.getvalue().split()[-40:])
        raise CommandError(f"torchrun cannot read machine {index}'s command: {why}") from None
    for name, flag in _REFUSED.items():
        if getattr(args, name, False):
            raise CommandError(f"machine {index}'s command uses {flag}: run the script itself, `{SCRIPT}`")
    if args.training_script != SCRIPT:
        raise CommandError(f"machine {index}'s command runs {args.training_script!r}: it must run the script in "
                           f"this cell, `{SCRIPT}`, followed by its own options if any")
    tail = 1 + len(args.training_script_args)
    parsed = {k: v for k, v in vars(args).items() if isinstance(v, (str, int, float, bool, type(None)))}
    return Node(index, command, tuple(argv[:-tail]), tuple(args.training_script_args), parsed)


def read(code: str, machines: int, values: dict[str, str]) -> list[Node]:
    """Every machine's command from the cell, variables set, parsed; CommandError if one cannot run.

    Where each machine meets the others is judged as written, as it would behave on machines of their
    own: on one machine, as the grader runs them, "localhost" would be the first machine too."""
    commands = written(code, machines)
    for i, command in enumerate(commands):
        problem = _meeting_place(parse(i, expand(command, {**values, "HEAD": _FIRST_MACHINE})))
        if problem:
            raise CommandError(problem)
    if not any("$PORT" in c or "${PORT}" in c for c in commands):
        raise CommandError("no command uses $PORT: a port written into the commands is one that another job on "
                           "the cluster may use too. Meet at the port the job was given, $PORT")
    found = [parse(i, expand(c, values)) for i, c in enumerate(commands)]
    if len({n.script_args for n in found}) > 1:
        raise CommandError(f"the machines run `{SCRIPT}` with different arguments: give every machine the same")
    return found


_FIRST_MACHINE = "first-machine-of-the-job"  # $HEAD while the commands are judged as written
_LOOPBACK = re.compile(r"^(localhost|127(\.\d+){3}|::1|0\.0\.0\.0|::)$", re.IGNORECASE)
_TO_MEET = "--rdzv-backend=c10d --rdzv-endpoint=$HEAD:$PORT --rdzv-id=$JOB_ID, the same on every machine"


def _meeting_place(node: Node) -> str | None:
    """Why this machine would not meet the others on a real cluster, from where its command says to meet."""
    if node.rendezvous == "standalone":
        return (f"machine {node.index}'s command uses --standalone: a rendezvous of its own, on that machine "
                f"alone, so each machine would be a job by itself. Machines meet at the first one: {_TO_MEET}")
    by_address = node.rendezvous == "static" and not node.get("rdzv_endpoint")
    flag = "--master-addr" if by_address else "--rdzv-endpoint"
    host = node.get("master_addr") if by_address else node.endpoint.rsplit(":", 1)[0]
    host = (host or "").strip("[]")
    if host == _FIRST_MACHINE or (node.index == 0 and _LOOPBACK.match(host)):
        return None  # the first machine may name itself: its agent hosts the rendezvous
    if not host:
        return (f"machine {node.index}'s command gives no {flag}: torchrun then meets at localhost, which on a "
                f"cluster is each machine itself. Meet at the first machine: {_TO_MEET}")
    if _LOOPBACK.match(host):
        return (f"machine {node.index}'s command meets at {host} ({flag}): on a cluster that is machine "
                f"{node.index} itself, so its agent would host a rendezvous of its own and wait forever for the "
                f"others. Meet at the first machine, $HEAD: {_TO_MEET}")
    return (f"machine {node.index}'s command meets at {host!r} ({flag}), which the cluster does not give as the "
            f"job's first machine: meet at $HEAD, its address: {_TO_MEET}")


def why_apart(nodes: list[Node]) -> list[str]:
    """What in the commands keeps the machines from forming one job (each a reason), read from the options."""
    reasons = []
    kinds = {n.rendezvous for n in nodes}
    if "standalone" in kinds:
        reasons.append("--standalone makes each agent a job of its own, on its own machine")
    if len(kinds) > 1:
        reasons.append("the machines use different rendezvous: " + ", ".join(f"machine {n.index} {n.rendezvous}"
                                                                               for n in nodes))
    nnodes = {n.get("nnodes") for n in nodes}
    if len(nnodes) > 1 or nnodes == {"1"} or nnodes == {"1:1"}:
        reasons.append("--nnodes must be the number of machines, the same on both: "
                       + ", ".join(f"machine {n.index} says {n.get('nnodes')}" for n in nodes))
    for what, value in (("--rdzv-endpoint (or --master-addr:--master-port)", lambda n: n.endpoint),
                        ("--rdzv-id", lambda n: n.get("rdzv_id"))):
        seen = {value(n) for n in nodes}
        if len(seen) > 1 and "standalone" not in kinds:
            reasons.append(f"{what} differs: " + ", ".join(f"machine {n.index} {value(n)!r}" for n in nodes)
                           + ": agents meet only where and under the name they all give")
    if kinds == {"static"}:
        ranks = [n.get("node_rank") for n in nodes]
        if len(set(ranks)) < len(ranks):
            reasons.append(f"both machines say --node-rank={ranks[0]}: the static rendezvous needs each machine's "
                           "own number, 0 to nnodes - 1 (0 on the machine it meets at)")
    return reasons
