"""Whatever a rank writes into its trace, the grader's verdict is a report: every exercise's checks, its
diagnosis and its timeline are judged on traces of random shapes (every field the grader reads, of every
type), and none of them raises."""

from __future__ import annotations

import random

import pytest
import torch

from autograder import engine, exercises
from autograder.evidence import RankRecord, WorldRun
from autograder.launch import Layout

KINDS = ("enter", "leave", "collective", "collective_done", "scored", "stage", "shards", "case", "case_done",
         "forward", "forward_done", "backward", "backward_done", "measure", "measured", "predicted", "sampler_iter",
         "set_epoch", "dataloader", "save", "saved", "load", "optimizer_step", "ddp", "ddp_forward", "buffers",
         "init_process_group", "init_process_group_called", "destroy_process_group", "micro_batch",
         "gradient_allreduce", "worker", "resume", "loaded", "optimizer_state", "sharded", "own", "own_done",
         "own_failed", "cuda_set_device", "fault")
FIELDS = ("call", "op", "n", "t", "seq", "caller", "index", "error", "shape", "root", "peer", "bytes", "ops",
          "indices", "epoch", "env", "values", "norms", "path", "keys", "layers", "columns", "rows", "a_shape",
          "b_shape", "parameters", "value", "scheme", "sync", "backend", "world_size", "rank", "requested_backend",
          "init_method", "device", "device_ids", "held", "params", "fsdp", "jobs_before", "previous", "num_replicas",
          "batch_size", "shuffle", "sampler", "needs_grad", "rows", "micro_batches", "attempt", "pid")


def _value(rng: random.Random, depth: int = 0):
    choices = [None, True, -1, 0, 3, 2.5, float("nan"), "x", "all_reduce", "", [], {}]
    if depth < 3:
        choices += [[_value(rng, depth + 1) for _ in range(rng.randint(0, 3))],
                    {rng.choice(FIELDS): _value(rng, depth + 1) for _ in range(rng.randint(0, 3))}]
    return rng.choice(choices)


def _event(rng: random.Random, seq: int) -> dict:
    event = {"kind": rng.choice(KINDS), "seq": seq, "t": 1000.0 + seq * 0.001}
    for name in rng.sample(FIELDS, rng.randint(0, 8)):
        event[name] = _value(rng)
    return event


def _world(rng: random.Random, size: int, label: str) -> WorldRun:
    ranks = []
    for r in range(size):
        record = RankRecord(r, rng.choice([0, 1, -9, None]), "out", "stack", order=r,
                            events=[_event(rng, k) for k in range(rng.randint(0, 40))],
                            result=_value(rng), finished=rng.random() < 0.7, error=rng.choice([None, "Boom"]))
        record.snapshots = [(rng.choice(["optimizer step", "after step", "epoch 0 start"]), torch.rand(4))
                            for _ in range(rng.randint(0, 3))]
        ranks.append(record)
    return WorldRun(Layout(size), ranks, None, rng.random() < 0.1, 0.1, "/grading/work/w", job=label)


@pytest.mark.parametrize("exercise_id", [i for i in exercises.ids() if i not in exercises.CONCEPT_CHECKS])
def test_a_trace_of_any_shape_gets_a_report_not_an_exception(exercise_id):
    exercise = exercises.get(exercise_id)
    rng = random.Random(exercise_id)
    for trial in range(25):
        worlds = [_world(rng, size, job.name if job else "") for size, job in
                  ([(j.world_size, j) for j in exercise.jobs] or [(s, None) for s in exercise.world_sizes])]
        report = engine.verdict(exercise, worlds, None, "gloo", [w.world_size for w in worlds], 0, "student.py")
        assert report.checks and len(report.checks) == len(exercise.checks)


def test_a_rank_that_died_of_a_signal_inside_a_collective_its_peers_never_called_is_told_as_that_deadlock():
    """The others finished without calling it, so the collective could never return: however that rank then ended
    (gloo raised when their connections closed, or, rarely, the process aborted in native code), the cause is the
    collective called on one rank only, not a crash of its own."""
    from autograder import diagnosis
    call = {"call": "all_reduce", "n": 1, "caller": "exercise cell line 7, in save", "seq": 2}
    waiting = RankRecord(0, -6, "malloc(): unaligned tcache chunk detected", "", order=1, events=[
        {"kind": "enter", **call}, {"kind": "collective", "op": "all_reduce", "caller": call["caller"], "seq": 3}])
    done = RankRecord(1, 0, "", "", order=0, finished=True)
    world = WorldRun(Layout(2), [waiting, done], None, False, 0.1, "/grading/work/w")
    assert world.culprit() is None and world.abandoned() is waiting
    assert diagnosis.summary(world).startswith("world size 2: deadlock: rank 0 in all_reduce #1"), diagnosis.summary(world)
