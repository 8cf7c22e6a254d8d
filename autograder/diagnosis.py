"""Why a launch did not complete, told from the student's side.

One failure at a time, the first one: the rank whose own error came first is named with its
own exception or signal, and the ranks that failed because it was gone are named as its
victims. A deadlock names what each rank waits in, and why nothing can move.
"""

from __future__ import annotations

import re
from pathlib import Path

from autograder.evidence import RankRecord, WorldRun
from autograder.hints import Hint
from autograder.sandbox import package_dir

GRADER_DIR = package_dir("ranks")  # the frames of the ranks' side of the grader, left out of what is shown
ABANDONED = ("A collective returns only once every rank has called it, so in a real job this rank would wait "
             "until the process group's timeout (30 minutes by default) and then fail. Call every collective "
             "on every rank, and use its result only where you need it.")


def describe_problem(worlds: list[WorldRun], student: Path) -> str:
    """The first crash or hang among the launches, or "" when they all completed."""
    for world in worlds:
        if not world.complete:
            return f"{summary(world)}\n{_body(world, student)}".rstrip()
    return ""


def exhausted(worlds: list[WorldRun]) -> str:
    """What the submission ran out of, where it did: memory (the kernel killed one of its processes) or room
    for its files; "" if nothing."""
    from autograder.limits import Limits

    limits = Limits.from_environment()
    said = []
    for world in worlds:
        if world.out_of_memory:
            said.append(f"{world.label}: out of memory: the submission's processes, with the files they wrote, "
                        f"used more than {limits.memory_mb} MB in all, and the kernel killed one of them")
        if world.disk_full:
            said.append(f"{world.label}: no space left for files: the submission filled its work directory "
                        f"({limits.work_mb} MB), /tmp or /dev/shm ({limits.tmp_mb} MB each), so whatever it wrote "
                        "next, its own output and trace included, was lost")
    return "\n".join(said)


def _busy(world: WorldRun) -> str:
    """A time limit passed on a machine with more work than CPUs: the grade may be the machine's fault."""
    if world.load < 1.5:
        return ""
    return (f"; the machine was busy ({world.load:.1f} runnable processes per CPU): run the check again when "
            "it is quieter, or allow more time (python -m autograder grade --timeout SECONDS)")


def summary(world: WorldRun) -> str:
    """One line saying why this launch did not complete: a crash first, then a deadlock, then the time limit."""
    head = world.label
    if world.host_failure:
        return f"{head}: the grader lost the ranks: {world.host_failure.splitlines()[0][:300]}"
    if world.duplicates:
        return (f"{head}: the agents formed separate jobs, each numbering its workers from 0: "
                f"{'; '.join(world.duplicates[:4])} found its RANK taken by another agent's worker")
    if world.unmet is not None:
        started = "no worker started" if not any(r.events for a in world.attempts for r in a) else \
            "no worker of theirs was running"
        return (f"{head}: no rendezvous: the agents waited {world.unmet:.0f} s for each other and {started}; "
                "the grader stopped them")
    said = getattr(world, "slurm", None) or {}
    if said.get("error"):
        return f"{head}: {said['error']}"
    if said.get("state") not in (None, "COMPLETED") and all(r.ok for r in world.ranks):
        return (f"{head}: its workers ended, but Slurm ended the batch job {said['state']} (exit code "
                f"{said.get('exit') or '?'}): a task of the batch script failed. The job's output ends:\n"
                + "\n".join(world.agent_output.strip().splitlines()[-6:]))
    culprit = world.culprit()
    if culprit is not None:
        line = f"{head}: rank {culprit.rank} {culprit.how_it_ended()}"
        others = [r for r in world.ranks if r is not culprit and not r.ok]
        alike = [r.rank for r in others if r.exitcode is not None and not r.peer_gone
                 and r.how_it_ended() == culprit.how_it_ended()]
        victims = [r.rank for r in others if r.rank not in alike]
        if alike:
            line += f"; so did rank(s) {', '.join(map(str, alike))}"
        if victims:
            line += f"; rank(s) {', '.join(map(str, victims))} failed or were stopped because it was gone"
        return line
    abandoned = world.abandoned()
    if abandoned is not None:
        call = abandoned.pending_collective()
        pending = abandoned.pending_call() or {"call": call.get("op"), "n": "?", "caller": call.get("caller")}
        return f"{head}: deadlock: rank {abandoned.rank} in {_call(pending)}, {_left_alone(world, abandoned.rank, pending)}"
    if world.stall is not None:
        return f"{head}: deadlock: {_deadlock_cause(world)}"
    if world.timed_out:
        running = [r.rank for r in world.ranks if r.exitcode is None]
        return (f"{head}: rank(s) {', '.join(map(str, running))} still running at the time limit of "
                f"{world.timeout:g} s, while not waiting for any other rank (still computing, or waiting on "
                "something that is not a collective)" + _busy(world))
    unstarted = [r.rank for r in world.ranks if r.exitcode is None and not r.events]
    if world.plan is not None and unstarted and all(r.ok for r in world.ranks if r.rank not in unstarted) \
            and all(c == 0 for c in world.agents.values()):
        return (f"{head}: rank(s) {', '.join(map(str, unstarted))} never started: the agents ran a job of "
                f"{world.world_size - len(unstarted)} worker(s), not {world.world_size}")
    agent = _failed_agent(world)
    if agent is not None:
        return (f"{head}: the agent of machine {agent} ended with exit code {world.agents[agent]}, and rank(s) "
                f"{', '.join(str(r.rank) for r in world.ranks if not r.ok)} never ran to the end")
    odd = next((r for r in world.ranks if not r.ok), None)
    return f"{head}: rank {odd.rank} {odd.how_it_ended()}" if odd else f"{head} completed"


def hint_for(world: WorldRun) -> Hint | str:
    """What to do about a launch that did not complete, by how it ended: a crash, a deadlock, the time limit."""
    if world.host_failure:
        return "the grader itself failed, not your code: run the check again"
    if world.duplicates or world.unmet is not None:
        return _RENDEZVOUS
    culprit = world.culprit()
    if culprit is not None:
        if any(not r.ok and r is not culprit and (r.peer_gone or r.exitcode is None) for r in world.ranks):
            return _CRASH_WITH_VICTIMS
        return _CRASH
    if world.stall is not None and {e.get("call") for e in world.stall.waiting.values()} == {"init_process_group"}:
        return _JOINING
    if world.abandoned() is not None or world.stall is not None:
        return _DEADLOCK
    if world.timed_out:
        return _TIME_LIMIT
    return "read what the report says above of how each rank ended"


_CRASH = Hint(
    idea="A rank ended with an error of its own: the error above says what went wrong and on which line.",
    section="4:When a worker fails",
    where="The traceback above: its last line that names your code is where the error was raised.",
    how="Read the error's last line, then that line of your code, and make it right for every rank and world size.")
_CRASH_WITH_VICTIMS = Hint(
    idea=("One rank failed on its own, and the other ranks failed or were stopped because it was gone: the rank "
          "named first is the one to look at."),
    section="4:When a worker fails",
    where="The first rank's traceback above, and its last line in your code: the other ranks' errors are echoes.",
    how=("Fix what made that one rank fail; the others' errors go away with it. Do not add waits or barriers "
         "around the failure: a rank that is gone never arrives."))
_JOINING = Hint(
    idea="Every process joins one group, with the rank and the world size the launcher gave it.",
    section="2:3. `init_process_group` comes first",
    where="Your call that joins the process group, and whatever you pass it.",
    how=("Pass only the backend: the launcher's environment already says where to meet, how many processes there "
         "are and which one this is; a world size, rank or address of your own keeps the processes apart."),
    lines_of=("init_process_group",))
_DEADLOCK = Hint(
    idea=("A collective returns only once every rank has called it, in the same order, with tensors of the same "
          "shape: a rank that calls one the others never call waits for ever."),
    section="1:Every rank calls every collective, in the same order",
    where="The collective the report names, and any branch on the rank around it.",
    how=("Call the same collectives on every rank, outside any branch on the rank; let the rank decide only what "
         "to do with the result, such as which rank writes a file."),
    lines_of=("collective",))
_TIME_LIMIT = Hint(
    idea="The ranks were computing, not waiting for each other, when the time ran out.",
    section="4:5. When it hangs",
    where="Your loops: the one the report shows each rank in, and how many steps or epochs it runs.",
    how="Make every loop end after the work the exercise asks for; look for a condition that never turns false.")
_RENDEZVOUS = Hint(
    idea="The agents of one job meet at one rendezvous: the same backend, endpoint and job id, and the same number of machines.",
    section="4:4. Several machines",
    where="The launch command of each machine, side by side, and what the agents printed above.",
    how="Give every machine the same rendezvous options and the same machine count, so that they form one job.")


def _failed_agent(world: WorldRun) -> int | None:
    """The first torchrun agent that failed on its own (not stopped by the grader), in a job of several."""
    if len(world.agents) < 2:
        return None  # one agent fails exactly when its workers do: they are the story
    return next((i for i, code in sorted(world.agents.items()) if code not in (0, None)), None)


def _body(world: WorldRun, student: Path) -> str:
    if world.host_failure or world.duplicates:
        return ""
    if world.unmet is not None or (world.culprit() is None and _failed_agent(world) is not None):
        said = _tail(world.agent_output, 4)
        return f"What the agents said last:\n{said}" if said else ""
    culprit = world.culprit()
    if culprit is not None:
        mismatch = _mismatched_message(world)
        if mismatch:
            return f"{mismatch}\n{_body_of_crash(culprit, student)}"
        return _body_of_crash(culprit, student)
    if world.abandoned() is not None:
        return ABANDONED
    if world.stall is not None or world.timed_out:
        return _stacks(world, student)
    return ""


# Errors whose message does not say what to do, with what to do.
_EXPLAINED = {
    "SyncBatchNorm": ("PyTorch's nn.SyncBatchNorm trains only on GPUs (DDP refuses it in a CPU model, and its forward "
                      "pass refuses CPU tensors). On CPUs use the course's ddpcourse.convert_sync_batchnorm(model): "
                      "PyTorch's class on GPUs, the course's CPU stand-in elsewhere."),
    "fully_shard": ("fully_shard met parameters that are sharded already (DTensors): a module's parameters are "
                    "sharded by the first fully_shard that reaches them, so a parent sharded before its children "
                    "leaves the children nothing plain to shard. Shard every block first, then the root."),
}


def _explained(culprit: RankRecord) -> str:
    line = culprit.exception_line()
    if "SyncBatchNorm" in line and ("GPU" in line or "gpu" in line):
        return _EXPLAINED["SyncBatchNorm"] + "\n"
    if "Invariant encountered" in line and "_init_sharding_spec" in (culprit.error or ""):
        return _EXPLAINED["fully_shard"] + "\n"
    return ""


def _body_of_crash(culprit: RankRecord, student: Path) -> str:
    if culprit.error:
        return _explained(culprit) + tidy_traceback(culprit.error, student)
    stack = tidy_stack(culprit.output, student)  # faulthandler prints a fatal signal's stack to stderr
    if culprit.exitcode is not None and culprit.exitcode < 0 and stack:
        return f"Where it was:\n{stack}"
    return "Its last output:\n" + (_tail(culprit.output) or "(none)")


def _mismatched_message(world: WorldRun) -> str:
    """The first message received into a buffer of another size than the tensor sent, or ""."""
    for sender in world.ranks:
        for receiver in world.ranks:
            sent = [m for m in sender.messages() if m[0] == "send" and m[1] == receiver.rank]
            taken = [m for m in receiver.messages() if m[0] == "recv" and m[1] in (sender.rank, None)]
            for k, (s, t) in enumerate(zip(sent, taken)):
                if s[2] != t[2]:
                    return (f"Message {k + 1} from rank {sender.rank} to rank {receiver.rank}: rank {sender.rank} "
                            f"sent {s[2]} bytes ({s[3]}), rank {receiver.rank} received into a buffer of {t[2]} bytes "
                            f"({t[3]}). A receive's buffer must have the shape and dtype of the tensor sent.")
    return ""


def _deadlock_cause(world: WorldRun) -> str:
    stall = world.stall
    waits = {rank: event for rank, event in stall.waiting.items()}
    where = ", ".join(f"rank {r} in {_call(e)}" for r, e in sorted(waits.items()))
    if stall.exited:
        rank, event = min(waits.items())
        return f"{where}; {_left_alone(world, rank, event)}"
    calls = {e.get("call") for e in waits.values()}
    if calls == {"init_process_group"}:
        return f"{where}: {_init_cause(world, waits)}"
    if "mp.spawn" in calls:
        return (f"{where}: mp.spawn inside a script that the launcher already started once per process starts "
                "more processes that wait for peers that never come; let the launcher start the processes")
    done = sorted(r for r, e in waits.items() if e.get("by") == "grader")
    stuck = {e["of"].split(" #")[0] if e.get("of") else e.get("call") for e in waits.values() if e.get("by") != "grader"}
    if done and stuck:
        return (f"{where}: rank(s) {', '.join(map(str, done))} finished your code without calling "
                f"{' or '.join(sorted(map(str, stuck)))}; a collective returns only once every rank has called it")
    if len(calls) > 1:
        return f"{where}: the ranks wait in different calls, and each call needs every rank"
    numbers = {e.get("n") for e in waits.values()}
    if len(numbers) > 1:
        return f"{where}: the ranks have called it a different number of times"
    roots = {e.get("root") for e in waits.values()}
    if len(roots) > 1:
        shown = ", ".join(f"rank {r}: {e.get('root')}" for r, e in sorted(waits.items()))
        return (f"{where}: the ranks name different root ranks ({shown}); every rank must name the same one, "
                "the rank whose tensor is sent (or that receives the result)")
    if calls == {"send"}:
        return (f"{where}: every rank is in a blocking send and none is receiving; a send returns only once its "
                "peer receives, so some ranks must receive first (or send with isend and wait after receiving)")
    shapes = {str(e.get("shape")) for e in waits.values()}
    if len(shapes) > 1:
        shown = ", ".join(f"rank {r} {e.get('shape')}" for r, e in sorted(waits.items()))
        return f"{where}: the tensors differ in shape ({shown}), so the ranks cannot exchange them"
    return f"{where}: every rank is waiting, and none can move"


def _left_alone(world: WorldRun, rank: int, pending: dict) -> str:
    """Why ``rank`` still waits in ``pending`` after the others ended: they never called it, or called it differently."""
    others = [r for r in world.ranks if r.rank != rank and r.exitcode is not None]
    same = {r.rank: e for r in others for e in r.of("enter")
            if e.get("call") == pending.get("call") and e.get("n") == pending.get("n")}
    never = [r.rank for r in others if r.rank not in same]
    if never:
        return (f"which rank(s) {', '.join(map(str, never))} ended without calling: a collective returns only "
                "once every rank has called it")
    shapes = {r: e.get("shape") for r, e in same.items()}
    if any(s != pending.get("shape") for s in shapes.values()):
        shown = ", ".join(f"rank {r} {s}" for r, s in sorted({**shapes, rank: pending.get("shape")}.items()))
        return f"which the other ranks called with tensors of other shapes ({shown}): the ranks cannot exchange them"
    return "which the other ranks called too, then ended: they did not wait for this rank"


def _init_cause(world: WorldRun, waits: dict[int, dict]) -> str:
    for rank, event in waits.items():
        size = event.get("world_size")
        if isinstance(size, int) and size != world.world_size:
            return (f"rank {rank} passed world_size={size}, but the launcher started {world.world_size} "
                    "process(es): it waits for peers that will never come; take the world size from the "
                    "launcher's environment")
        method = event.get("init_method")
        if isinstance(method, str) and method not in ("env://",):
            return (f"rank {rank} passed init_method={method!r}, a rendezvous the launcher did not prepare: "
                    "call init_process_group without init_method, so that it uses MASTER_ADDR and MASTER_PORT")
    for rank, event in waits.items():
        record = next((r for r in world.ranks if r.rank == rank), None)
        given = ((record.first("worker") or {}).get("env") or {}) if record else {}
        port = str(event.get("master", "")).rpartition(":")[2]
        if given.get("MASTER_PORT") and port != given["MASTER_PORT"]:
            return (f"rank {rank} joined at MASTER_PORT {port}, but torchrun gave it {given['MASTER_PORT']}, where "
                    "its agent keeps the job's store: leave the launcher's variables as they are")
    return "the ranks wait for each other to join the group and never meet"


def _call(event: dict) -> str:
    if event.get("by") == "grader":
        return f"the grader's {event.get('call')} after your code returned (the ranks leave together)"
    call = f"wait() for {event['of']}" if event.get("of") else f"{event.get('call')} #{event.get('n')}"
    if event.get("root") is not None:
        call += f" with root {event['root']}"
    if event.get("peer") is not None:
        call += f" {'to' if event.get('call') in ('send', 'isend') else 'from'} rank {event['peer']}"
    return f"{call} ({event['caller']})" if event.get("caller") else call


def _stacks(world: WorldRun, student: Path) -> str:
    parts = []
    for r in world.ranks:
        if r.exitcode is None:
            stack = tidy_stack(r.stack, student)
            parts.append(f"rank {r.rank} was here:\n{stack}" if stack else f"rank {r.rank} gave no stack")
        else:
            parts.append(f"rank {r.rank} had ended: {r.how_it_ended()}")
    return "\n".join(parts)


def tidy_traceback(text: str, student: Path) -> str:
    """Drop the grader's own frames; name the student's file 'exercise cell'."""
    lines = text.rstrip().splitlines()
    marker = f'File "{student}"'
    first = next((i for i, line in enumerate(lines) if marker in line), None)
    if first is not None:
        lines = ["Traceback (most recent call last):"] + lines[first:]
    kept, skipping = [], False
    for line in lines:
        if line.startswith("  File "):
            skipping = f"{GRADER_DIR}" in line
        elif not line.startswith("    "):
            skipping = False
        if not skipping:
            kept.append(line)
    return "\n".join(kept[-60:]).replace(f'"{student}"', '"exercise cell"')


def tidy_stack(text: str, student: Path) -> str:
    """From a faulthandler dump, the main thread's frames in the student's code, innermost first."""
    threads = re.split(r"\n(?=(?:Current thread|Thread) 0x)", text.strip())
    main = next((t for t in threads if t.startswith("Current thread")), threads[0] if threads else "")
    frames = [line.strip() for line in main.splitlines() if line.strip().startswith("File")]
    own = [f.replace(f'"{student}"', '"exercise cell"') for f in frames if str(student) in f]
    return "\n".join("  " + f for f in (own or frames[:3]))


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])
