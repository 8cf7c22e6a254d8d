"""A fault a job plants (exercise 4.2): where a worker is killed, decided outside every worker.

In a job that may plant one, every worker keeps one end of a socket pair, its line; the job's fork
server, which forks the worker, hands the other end to the rank host. After each optimizer step, and
halfway through writing each file with torch.save, the worker's trace stops and asks on its line
whether to go on (a save sends the descriptor of the file it writes). The rank host alone holds the
plan (a rank, an attempt, a step or a save, which one), which the grader sends only once the job's
fork server and agents are forked, so that no worker's memory was ever copied from a process that
knew it. The host answers "go", or kills the worker there with SIGKILL, a real one, the way a lost
machine ends a worker, and tells the grader what it interrupted. A plan may instead lose a machine
(exercise 4.5): the agent whose worker reached that point, and every worker of that agent, are killed
at once, as a machine that loses its power takes its agent and its workers with it. Every worker asks the same
questions, so nothing in any worker's memory, environment or files says where the fault lands. A
worker whose code goes around the trace asks nothing, is never killed, and the grader says it had
nothing to interrupt.
"""

from __future__ import annotations

import json
import os
import signal
import socket
from typing import Callable

GO = b"g"


class Plan:
    """The rank host's side: the fault, each worker's line, and what each worker has done so far."""

    def __init__(self, handed: socket.socket, say: Callable[..., None], lose_agent: Callable[[int], None]):
        self.handed = handed  # from the fork server: each new worker's line, with its pid, rank, attempt and agent
        self.say = say
        self.lose_agent = lose_agent  # kills an agent (the rank host's), for a lost machine
        self.fault: dict | None = None  # set by the grader's "plant" request
        self.lines: dict[socket.socket, tuple[int, int, int, int]] = {}  # line -> (pid, rank, attempt, agent)
        self.counted: dict[tuple[str, int, int, str], int] = {}  # ("rank" or "agent", which, attempt, when) -> times

    def sockets(self) -> list[socket.socket]:
        return [*([self.handed] if self.handed.fileno() >= 0 else []), *self.lines]

    def ready(self, sock: socket.socket):
        if sock is self.handed:
            self._take_line()
        else:
            self._answer(sock)

    def _take_line(self):
        try:
            message, fds, _, _ = socket.recv_fds(self.handed, 256, 1)
        except OSError:
            message, fds = b"", []
        for fd in fds:
            line = socket.socket(fileno=fd)
            try:
                who = json.loads(message)
                self.lines[line] = (int(who["pid"]), int(who["rank"]), int(who["attempt"]), int(who.get("agent", 0)))
            except (ValueError, KeyError, TypeError):
                line.close()
        if not message and not fds:
            self.handed.close()  # the fork server is gone

    def _answer(self, line: socket.socket):
        """The worker on ``line`` asks whether to go on: tell it to, or kill it here."""
        pid, rank, attempt, agent = self.lines[line]
        try:
            message, fds, _, _ = socket.recv_fds(line, 64, 1)
        except OSError:
            message, fds = b"", []
        path = _path_of(fds[0]) if fds else None
        for fd in fds:
            os.close(fd)
        when = message.strip().decode(errors="replace")
        if when not in ("step", "save"):  # the worker is gone, or says something no trace says
            self.forget(line)
            return
        for whose, which in (("rank", rank), ("agent", agent)):
            key = (whose, which, attempt, when)
            self.counted[key] = self.counted.get(key, 0) + 1
        fault = self.fault
        whose = "agent" if fault and "agent" in fault else "rank"
        which = agent if whose == "agent" else rank
        if fault and (fault.get(whose), fault.get("attempt", 0), fault.get("when")) == (which, attempt, when) \
                and self.counted[(whose, which, attempt, when)] == int(fault.get("n", 1)):
            lost = fault.get("lose") == "machine"
            if lost:
                self._lose_machine(agent)
            else:
                os.kill(pid, signal.SIGKILL)
                self.forget(line)
            self.say(fault={"rank": rank, "agent": agent, "attempt": attempt, "when": when,
                            "n": self.counted[(whose, which, attempt, when)], "path": path, "lost": lost})
            return
        try:
            line.sendall(GO)
        except OSError:
            self.forget(line)

    def _lose_machine(self, agent: int):
        """The agent and every worker of it killed at once, unwarned: what a machine that is lost takes with it."""
        self.lose_agent(agent)
        for line, (pid, _, _, of) in list(self.lines.items()):
            if of == agent:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.forget(line)

    def forget(self, line: socket.socket):
        self.lines.pop(line, None)
        line.close()

    def close(self):
        for line in list(self.lines):
            self.forget(line)
        self.handed.close()


def _path_of(fd: int) -> str | None:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")[:4096]
    except OSError:
        return None


def handing_pair() -> tuple[socket.socket, socket.socket]:
    """The host's end and the fork server's end of the socket that hands each worker's line over."""
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


def hand_over(handing: socket.socket, ours: socket.socket, pid: int, env: dict):
    """In the fork server, once worker ``pid`` is forked with the other end: give the host this end of its line."""
    who = {"pid": pid, "rank": env.get("RANK", "0"), "attempt": env.get("TORCHELASTIC_RESTART_COUNT", "0"),
           "agent": env.get("AUTOGRADER_AGENT", "0")}
    try:
        socket.send_fds(handing, [json.dumps(who).encode()], [ours.fileno()])
    except OSError:
        pass  # the host is gone
    ours.close()


class Line:
    """The worker's side: ask before going on after a step, and halfway through a save."""

    def __init__(self, sock: socket.socket):
        self.sock = sock

    def ask(self, when: str, file_fd: int | None = None):
        """Returns once the host says go (the host kills this process where the fault lands)."""
        try:
            socket.send_fds(self.sock, [when.encode() + b"\n"], [file_fd] if file_fd is not None else [])
            self.sock.recv(1)
        except OSError:
            pass  # the host is gone: the job is being stopped
