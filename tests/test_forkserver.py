"""The fork server of torchrun jobs (ranks/forkserver.py): to the agent, the stand-in it started
must look like the worker itself, in how it ends, the signals it takes and what it runs with."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import alive

# A server whose workers do what their argv says. It has drawn from torch's and Python's random
# generators before forking, as a warm host may have.
SERVER = """
import json, os, random, signal, sys, time
import torch
from ranks import forkserver

torch.rand(3), random.random()

def become(request):
    what, *rest = request["argv"]
    if what == "exit":
        os._exit(int(rest[0]))
    if what == "killed":
        os.kill(os.getpid(), signal.SIGKILL)
    if what == "term":
        signal.signal(signal.SIGTERM, lambda *_: os._exit(7))
    if what == "show":
        Path = __import__("pathlib").Path
        Path(rest[0]).write_text(json.dumps({"argv": request["argv"], "cwd": os.getcwd(),
            "env": os.environ.get("FORKSERVER_TEST"), "torch": torch.rand(3).tolist(), "random": random.random()}))
        os._exit(0)
    open(rest[0], "w").write(str(os.getpid()))
    time.sleep(60)
    os._exit(1)

forkserver.serve(forkserver.listen(sys.argv[1]), become)
"""
STAND_IN = ("import sys; from ranks.forkserver import stand_in; "
            "stand_in(sys.argv[1], sys.argv[2:]); sys.exit(99)")  # 99: the server could not be reached


@pytest.fixture(scope="module")
def server():
    name = f"autograder-test-{os.getpid()}-{os.urandom(4).hex()}"
    proc = subprocess.Popen([sys.executable, "-c", SERVER, name])
    yield name
    proc.kill()
    proc.wait()


def stand_in(server, *argv, cwd=None, env=None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", STAND_IN, server, *argv], cwd=cwd,
                            env={**os.environ, **(env or {})})


def worker_pid(path: Path, timeout: float = 60) -> int:
    deadline = time.monotonic() + timeout
    while not path.exists() or not path.read_text():
        assert time.monotonic() < deadline, "the worker never started"
        time.sleep(0.05)
    return int(path.read_text())


def test_the_stand_in_ends_with_its_workers_exit_code(server):
    assert stand_in(server, "exit", "3").wait(timeout=60) == 3
    assert stand_in(server, "exit", "0").wait(timeout=60) == 0


def test_a_worker_killed_by_a_signal_ends_its_stand_in_with_that_signal(server):
    assert stand_in(server, "killed").wait(timeout=60) == -signal.SIGKILL


def test_sigterm_to_the_stand_in_reaches_the_worker(server, tmp_path):
    proc = stand_in(server, "term", str(tmp_path / "pid"))
    worker_pid(tmp_path / "pid")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 7  # the worker's own SIGTERM handler ran


def test_a_stand_in_killed_takes_its_worker_with_it(server, tmp_path):
    proc = stand_in(server, "sleep", str(tmp_path / "pid"))
    pid = worker_pid(tmp_path / "pid")
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 10
    while alive({pid}) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive({pid})


def test_the_worker_runs_with_the_stand_ins_argv_environment_and_directory(server, tmp_path):
    shown = []
    for k in range(2):
        out = tmp_path / f"shown{k}.json"
        assert stand_in(server, "show", str(out), cwd=tmp_path, env={"FORKSERVER_TEST": str(k)}).wait(timeout=60) == 0
        shown.append(json.loads(out.read_text()))
    assert [s["env"] for s in shown] == ["0", "1"]
    assert all(s["cwd"] == str(tmp_path) and s["argv"][0] == "show" for s in shown)
    # Seeded afresh, as in two new processes, and not the state the server had when it forked.
    assert shown[0]["torch"] != shown[1]["torch"] and shown[0]["random"] != shown[1]["random"]


def test_with_no_server_the_stand_in_returns_to_start_cold():
    proc = stand_in(f"autograder-test-nobody-{os.urandom(4).hex()}")
    assert proc.wait(timeout=30) == 99


def test_a_request_that_is_not_a_stand_ins_fails_alone(server):
    import socket

    for junk in (b"not json\n", b'{"argv": ["exit", "0"]}\n', b"[1, 2]\n"):
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect("\0" + server)
        conn.sendall(junk)
        assert conn.recv(100) == b""  # closed, with no worker started
        conn.close()
    assert stand_in(server, "exit", "5").wait(timeout=60) == 5
