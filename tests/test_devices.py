"""pick() gives each process a GPU of its own, or the CPU for everyone; no GPU needed to test it."""

import pytest
import torch

from conftest import script
from ddpcourse import devices
from ddpcourse.devices import pick


@pytest.mark.parametrize("world_size", [1, 2, 4])
def test_no_gpu_means_gloo_on_cpu(world_size):
    for local_rank in range(world_size):
        assert pick(local_rank, world_size, gpu_count=0) == ("gloo", torch.device("cpu"))


def test_one_gpu_serves_one_process_only():
    assert pick(0, 1, gpu_count=1) == ("nccl", torch.device("cuda", 0))
    # two processes cannot each own the one GPU: both fall back to the CPU
    assert [pick(r, 2, gpu_count=1) for r in range(2)] == [("gloo", torch.device("cpu"))] * 2


def test_many_gpus_give_each_local_rank_its_own():
    assert [pick(r, 4, gpu_count=8) for r in range(4)] == [("nccl", torch.device("cuda", r)) for r in range(4)]
    assert [pick(r, 8, gpu_count=8)[1].index for r in range(8)] == list(range(8))


def test_fewer_gpus_than_processes_means_cpu():
    assert pick(3, 4, gpu_count=3) == ("gloo", torch.device("cpu"))


def test_counts_the_gpus_of_this_machine_by_default(monkeypatch):
    monkeypatch.setattr(devices.torch.cuda, "device_count", lambda: 2)
    assert pick(1, 2) == ("nccl", torch.device("cuda", 1))
    monkeypatch.setattr(devices.torch.cuda, "device_count", lambda: 1)
    assert pick(1, 2) == ("gloo", torch.device("cpu"))


@pytest.mark.parametrize("local_rank", [-1, 2])
def test_rejects_a_local_rank_outside_the_machine(local_rank):
    with pytest.raises(ValueError, match="local_rank"):
        pick(local_rank, 2, gpu_count=2)


def test_the_sandbox_shows_the_ranks_every_nvidia_device_node_and_no_other(tmp_path, monkeypatch):

    from autograder import sandbox

    for name in ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-caps", "null", "dri"):
        (tmp_path / name).touch()
    nodes = sandbox.gpu_device_nodes(tmp_path)
    assert [n.name for n in nodes] == ["nvidia-caps", "nvidia-uvm", "nvidia0", "nvidia1", "nvidiactl"]

    monkeypatch.setattr(sandbox, "gpu_device_nodes", lambda: nodes)
    args = sandbox.Sandbox("bwrap", drop_privileges=False).wrap(["true"], code=tmp_path, hosts=tmp_path / "hosts")
    bound = [args[i + 1] for i, a in enumerate(args) if a == "--dev-bind"]
    assert bound == [str(n) for n in nodes]
    assert args.index("--dev") < args.index("--dev-bind")  # bound into the fresh /dev, not hidden by it
    monkeypatch.setattr(sandbox, "gpu_device_nodes", lambda: [])
    assert "--dev-bind" not in sandbox.Sandbox("bwrap", drop_privileges=False).wrap(["true"], code=tmp_path,
                                                                                    hosts=tmp_path / "hosts")


def test_nccl_is_refused_with_fewer_gpus_than_ranks_saying_what_to_do(monkeypatch):
    from autograder import engine
    from autograder.source import UsageError

    monkeypatch.setattr(engine, "gpu_count", lambda: 1)
    assert engine.choose_backend([1, 2, 3]) == "gloo"
    assert engine.choose_backend([1]) == "nccl"
    assert engine.choose_backend([1], "nccl") == "nccl"
    with pytest.raises(UsageError, match=r"up to 3 ranks and this machine has 1 GPU.*--backend gloo.*at most 1"):
        engine.choose_backend([1, 2, 3], "nccl")
    monkeypatch.setattr(engine, "gpu_count", lambda: 0)
    with pytest.raises(UsageError, match="has none: grade with --backend gloo"):
        engine.choose_backend([1], "nccl")


def test_nodes_simulated_on_one_machine_with_nccl_each_get_gpus_of_their_own():
    from autograder.jobs import Job, standalone

    two_nodes = Job("2 machines", 4, (("--nnodes=2",), ("--nnodes=2",)), nodes=2)
    assert two_nodes.agent_env("nccl") == [{"CUDA_VISIBLE_DEVICES": "0,1"}, {"CUDA_VISIBLE_DEVICES": "2,3"}]
    assert two_nodes.agent_env("gloo") == [{}, {}]  # gloo hides every GPU from the whole job instead
    assert two_nodes.request("train.py", "gloo")["env"]["CUDA_VISIBLE_DEVICES"] == ""
    assert standalone(2).agent_env("nccl") == [{}]  # one node: torchrun's local ranks are the GPUs


def test_forked_ranks_of_simulated_nodes_with_nccl_each_see_their_nodes_gpus():
    from autograder.launch import Layout, torchrun_environment

    seen = [torchrun_environment(Layout(4, nodes=2), rank, use_gpus=True) for rank in range(4)]
    assert [(e["LOCAL_RANK"], e["CUDA_VISIBLE_DEVICES"]) for e in seen] == [
        ("0", "0,1"), ("1", "0,1"), ("0", "2,3"), ("1", "2,3")]
    assert "CUDA_VISIBLE_DEVICES" not in torchrun_environment(Layout(2), 0, use_gpus=True)
    assert torchrun_environment(Layout(4, nodes=2), 0, use_gpus=False)["CUDA_VISIBLE_DEVICES"] == ""


def test_every_function_exercise_either_puts_its_work_on_the_ranks_gpus_or_is_graded_on_cpus():
    from autograder import exercises
    from autograder.sandbox import package_dir

    for exercise_id in exercises.ids():
        exercise = exercises.get(exercise_id)
        if exercise.kind == "function" and not exercise.on_cpu:
            # its harness places the work on the rank's GPU, or the student's code does and a GPU-only check sees it
            source = (package_dir("ranks") / "exercises" / f"{exercises.MODULES[exercise_id]}.py").read_text()
            assert "device_for(" in source or any(c.gpu_only for c in exercise.checks), \
                f"{exercise_id}: nccl would be handed CPU tensors; mark it on_cpu"


@pytest.mark.parametrize("exercise_id, submission, backend", [
    ("1.1", "ex1_1/correct_loops.py", "gloo"), ("2.3", "ex2_3/correct_strided.py", "nccl")])
def test_with_a_gpu_per_rank_only_exercises_on_gpu_tensors_get_nccl(exercise_id, submission, backend, monkeypatch):
    from autograder import engine
    from conftest import SUBMISSIONS

    chosen = []

    def grade(exercise, host, student, grading, sizes, backend, *args, **kwargs):
        chosen.append(backend)
        return engine._failed(exercise.id, sizes, "", "not launched")

    monkeypatch.setattr(engine, "gpu_count", lambda: 8)
    monkeypatch.setattr(engine, "_grade", grade)
    engine.grade(exercise_id, SUBMISSIONS / submission, [1, 2])
    assert chosen == [backend]


def _graded(*checks, problem=""):
    return {"checks": [{"name": n, "status": s, "message": m} for n, s, m in checks], "problem": problem}


def test_the_gpu_check_lists_each_verdict_nccl_changed_and_each_gpu_only_check_not_passed():
    differences = script("gpu_check").differences
    gloo = _graded(("runs", "passed", ""), ("mean", "failed", "sum"), ("bound to its GPU", "skipped", "CPU"))
    assert differences(_graded(("runs", "passed", ""), ("mean", "failed", "sum"), ("bound to its GPU", "passed", "")),
                       gloo) == []
    found = differences(_graded(("runs", "failed", "rank 0 raised"), ("mean", "failed", "sum"),
                                ("bound to its GPU", "failed", "cuda:0 twice"), problem="rank 0 raised"), gloo)
    assert found == ["runs: passed on gloo, failed on nccl: rank 0 raised",
                     "GPU-only check failed: bound to its GPU: cuda:0 twice", "only on nccl: rank 0 raised"]
    assert differences({"error": "exit 2: no GPU"}, gloo) == ["the grader failed: exit 2: no GPU"]


def test_the_gpu_check_grades_each_exercise_at_the_world_sizes_the_gpus_allow():
    sizes_for = script("gpu_check").sizes_for
    assert sizes_for("2.3", 1) == [1] and sizes_for("2.3", 8) == [1, 2, 3]
    assert sizes_for("4.3", 2) == [] and sizes_for("4.3", 4) == [4]
