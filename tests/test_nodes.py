"""The launch commands of exercise 4.3, read from the cell without running it (autograder/nodes.py)."""

from __future__ import annotations

import pytest

from autograder import nodes

VALUES = {"HEAD": "127.0.0.1", "PORT": "4242", "JOB_ID": "job-7"}
C10D = "torchrun --nnodes=2 --nproc-per-node=2 --rdzv-backend=c10d --rdzv-endpoint=$HEAD:$PORT --rdzv-id=$JOB_ID"


def cell(*commands: str, body: str = "") -> str:
    return f"import os\nNODE_COMMANDS = {list(commands)!r}\n{body}"


def test_each_command_becomes_the_options_of_one_agent_and_the_scripts_arguments():
    machines = nodes.read(cell(f"{C10D} train.py --epochs 2", f"{C10D} train.py --epochs 2"), 2, VALUES)
    assert [m.index for m in machines] == [0, 1]
    assert machines[0].options == ("--nnodes=2", "--nproc-per-node=2", "--rdzv-backend=c10d",
                                   "--rdzv-endpoint=127.0.0.1:4242", "--rdzv-id=job-7")
    assert machines[0].script_args == ("--epochs", "2")
    assert machines[0].rendezvous == "c10d" and machines[0].endpoint == "127.0.0.1:4242"
    assert nodes.why_apart(machines) == []


@pytest.mark.parametrize("code,said", [
    ("x = 1\n", "defines no NODE_COMMANDS"),
    ("NODE_COMMANDS = [make(0), make(1)]\n", "written out as a list of strings"),
    (cell(f"{C10D} train.py"), "a list of 2 strings"),
    (cell(f"{C10D} --rdzv-conf=$TOKEN train.py", f"{C10D} train.py"), "$TOKEN is not set"),
    (cell("torchrun --standalone --nproc-per-node=2 train.py", "torchrun --standalone train.py"),
     "machine 0's command uses --standalone"),
    (cell(*[C10D.replace("$PORT", "29500") + " train.py"] * 2), "no command uses $PORT"),
    (cell(f"{C10D} train.py", C10D.replace("$HEAD", "localhost") + " train.py"), "machine 1's command meets at localhost"),
    (cell(*[C10D.replace("$HEAD", "127.0.0.1") + " train.py"] * 2), "machine 1's command meets at 127.0.0.1"),
    (cell(f"{C10D} train.py", C10D.replace("--rdzv-endpoint=$HEAD:$PORT ", "") + " train.py"),
     "machine 1's command gives no --rdzv-endpoint"),
    (cell(*["torchrun --nnodes=2 --nproc-per-node=2 --node-rank=0 --master-port=$PORT train.py"] * 2),
     "machine 1's command meets at 127.0.0.1 (--master-addr)"),
    (cell(f"{C10D} train.py", C10D.replace("$HEAD", "node0") + " train.py"), "meets at 'node0'"),
    (cell("python train.py $PORT", f"{C10D} train.py"), "must start with `torchrun`"),
    (cell(f"{C10D} -m train", f"{C10D} train.py"), "-m/--module"),
    (cell(f"{C10D} other.py", f"{C10D} train.py"), "runs 'other.py'"),
    (cell(f"{C10D} train.py --epochs 1", f"{C10D} train.py"), "different arguments"),
    (cell(f"{C10D} --nproc-per-node train.py", f"{C10D} train.py"), "torchrun cannot read machine 0's command"),
])
def test_commands_that_cannot_run_as_written_are_refused_with_what_to_change(code, said):
    with pytest.raises(nodes.CommandError) as refused:
        nodes.read(code, 2, VALUES)
    assert said in str(refused.value)


def test_the_first_machine_may_meet_at_itself_by_any_name_of_itself():
    machines = nodes.read(cell(C10D.replace("$HEAD", "localhost") + " train.py", f"{C10D} train.py"), 2, VALUES)
    assert [m.index for m in machines] == [0, 1]


def test_why_two_agents_stay_apart_is_read_from_their_options():
    static = "torchrun --nnodes=2 --nproc-per-node=2 --master-addr=$HEAD --master-port=$PORT"
    same_rank = nodes.read(cell(f"{static} --node-rank=0 train.py", f"{static} --node-rank=0 train.py"), 2, VALUES)
    assert any("--node-rank=0" in r for r in nodes.why_apart(same_rank))
    ids = nodes.read(cell(f"{C10D} train.py", C10D.replace("$JOB_ID", "other") + " train.py"), 2, VALUES)
    assert any("--rdzv-id differs" in r for r in nodes.why_apart(ids))
    one_each = nodes.read(cell(*[C10D.replace("--nnodes=2", "--nnodes=1") + " train.py"] * 2), 2, VALUES)
    assert any("--nnodes" in r for r in nodes.why_apart(one_each))
    mixed = nodes.read(cell(f"{C10D} train.py", f"{static} --node-rank=1 train.py"), 2, VALUES)
    assert any("different rendezvous" in r for r in nodes.why_apart(mixed))
    distinct = nodes.read(cell(f"{static} --node-rank=0 train.py", f"{static} --node-rank=1 train.py"), 2, VALUES)
    assert nodes.why_apart(distinct) == []
