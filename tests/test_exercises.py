"""Every exercise against its submissions: correct ones pass every check; each wrong one fails
the checks that name its mistake and no other."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import nbformat
import pytest

from autograder import engine, exercises
from autograder.report import Report
from autograder.timeline import Timeline
from autograder.exercises import ex4_6
from conftest import ROOT, SUBMISSIONS, edits, handed_in, slurm_missing

RUNS = {"1.1": "the code runs to the end on every rank at every world size",
        "1.2": "the code runs to the end on every rank at every world size",
        "1.3": "the code runs to the end on every rank at every world size",
        "1.4": "the code runs to the end on every rank at every world size",
        "2.1": "the code runs to the end on every rank at every world size",
        "2.2": "the script runs to the end on every rank",
        "2.3": "the code runs to the end on every rank at every world size",
        "2.5": "the script runs to the end on every rank",
        "2.6": "the code runs to the end on every rank at every world size",
        "3.1": "the code runs to the end on every rank at every world size",
        "3.2": "the script runs to the end on every rank",
        "4.1": ("every launch runs to the end: python, torchrun with 1, 2 and 3 processes, on 2 machines, and with no "
                "arguments"),
        "4.2": "every job finishes: never interrupted, and after each kill",
        "4.3": "the job of two machines runs to the end",
        "4.4": "every job finishes: never interrupted, and after each kill",
        "4.5": "every job finishes: at 1, 2 and 3 processes, and the one that lost a machine",
        "4.6": "the batch job runs to the end on the course's Slurm, after its preemption",
        "3.3": "the code runs to the end on every rank at every world size",
        "3.4": "the code runs to the end on every rank at every world size",
        "3.5": "the code runs to the end on every rank at every world size",
        "3.6": "the code runs to the end on every rank at every world size",
        "3.7": "the code runs to the end on every rank at every world size",
        "3.8": "the code runs to the end on every rank at every world size"}

# (exercise, wrong submission) -> the checks that name its mistake: exactly these fail. A control that
# crashes or hangs also fails "runs to the end"; the checks it leaves unjudged say so and fail nothing.
# Two names mean two mistakes in one control (a hand-made all-reduce that also sums).
MEAN = "after average_gradients every gradient is the mean over the ranks (in place)"
RING = "ring traffic: 2(W-1) messages per rank, each about 1/W of the tensor"
SUM = "every rank holds the sum over the ranks, in place, for every length"
STAGES = "stage_of: consecutive layers per rank, each layer on exactly one rank, as even as possible"
GRADIENTS = "every stage's gradients equal the unsplit model's on the whole batch"
GPIPE = ("messages follow GPipe: each micro-batch's activations forward and gradients back, between neighbours, "
         "all forwards before the backwards")
TP_SHARDS = "shard_weights: A split by columns, B by the matching rows, 1/W of each on every rank"
TP_OUTPUT = "the output equals the unsplit MLP's on every rank"
TP_GRADIENTS = "the gradients of the input and of each rank's shards equal the unsplit MLP's"
TP_COMMUNICATION = ("communication: one all-reduce of the output forward, one of the input's gradient backward, "
                    "nothing more")
MEMORY = "parameters and gradients on the busiest rank, for data, pipeline and tensor parallelism"
ADAM = "Adam's state on the busiest rank, for every scheme"
OVERLAP_MEAN = "after finish_gradient_synchronization every gradient is the mean over the ranks"
TOWER_FITS = "no rank ever holds more than the device's 112,000 bytes while building and loading"
TOWER_RESHARD = "reshard_after_forward reaches every block and not the root: with False each block stays gathered from forward to backward"
TOWER_PREDICTION = "predict says what one step gathers, and whether it fits, at world size 2"
BUCKETS = "one all-reduce per bucket, the buckets filled from the last parameter back up to bucket_numel"
OVERLAP = ("each bucket's all-reduce starts during backward, as soon as its gradients are ready, "
           "and runs while backward goes on")
NO_COMPUTATION = "with no computation, every bucket's all-reduce is exposed, one after another"
SLOW_COMPUTATION = "with slow computation, only the last bucket's all-reduce is exposed"
ZERO_SHARE = "each rank owns an even, contiguous share of the flattened parameters, together all of them once"
SLURM_AGENTS = "srun starts one torchrun agent per node: 2 nodes x 2 workers, RANK 0-3"
SLURM_SIGTERM = "on SIGTERM rank 0 snapshots the step every rank finished: nothing is trained twice"
# 2.5's planted bugs, each named by the symptom 2.2's checks see
BUGS = {"wrong_local_rank_as_rank": "exactly one process writes the checkpoint",
        "wrong_no_set_epoch": "the order of the samples changes every epoch",
        "wrong_extra_all_reduce": "equal to the single-process reference trained on the same global batches",
        "wrong_saves_wrapper": "the checkpoint loads strictly into the plain, unwrapped model",
        "wrong_no_destroy": "no process ends with its process group still open"}
BN_OUTPUT = "the output equals batch norm over all the ranks' batches put together"
BN_RUNNING = "running statistics updated on every rank with the batch mean and unbiased variance"
SYNCED = "every batch norm layer is synchronized when DDP wraps the model"
BN_GLOBAL = ("parameters equal one process trained on the whole global batches",
             "running statistics on every rank equal one process's on the whole global batches")
CONSOLIDATED = "consolidate_state_dict on every rank, then rank 0 alone saves"
ZERO_MODEL = "the checkpoint's model is the trained model and loads into a plain MLP"
ZERO_OPTIMIZER = "the checkpoint's optimizer state loads into a plain Adam and continues the run exactly"
SHARE = "each rank draws its own share of the data: the launcher's rank and world size"
SETTINGS = "settings from the command line: --epochs, --global-batch (all ranks together) and --out"
SAME_MODEL = "every launch trains the same model as one process on the same global batches"
LOADS = "after a restart every rank goes on from the snapshot: its weights, optimizer state and epoch"
TWICE = "no step a snapshot held is trained again: the restart resumes after the last whole snapshot"
EVERY_K = "a snapshot after every --snapshot-every steps: a kill loses fewer than that many"
BIT_FOR_BIT = "after each kill the final weights equal the uninterrupted run's, bit for bit"
ANY_SIZE = "the same training at any world size, a machine lost or not: every step as one process takes it"
STEPS_LEFT = "the survivor goes on after the last whole snapshot: no step trained twice, none skipped"
ORDER = "every epoch draws a new order of the data, in every attempt"
ATOMIC = "a snapshot is written atomically: a kill during the write leaves the last one whole"
SNAPSHOT_WRITER = "snapshots written by one rank: global rank 0"
ONE_JOB = "one job of 4 workers: 2 agents of 2, RANK 0-3, LOCAL_RANK 0 and 1 on each machine"
JOB_SHARE = "each rank draws its own share of the data across the whole job: RANK and WORLD_SIZE"
JOB_WRITER = "exactly one writer in the job: global rank 0, not one per machine"
JOB_MODEL = "the job trains the same model as one process on the same global batches"
MOMENTS = "Adam's two moments per rank: whole under DDP, whole tensors dealt out under ZeRO-1, sharded under FSDP"
ORDER_2_2 = "the order of the samples changes every epoch (set_epoch(epoch) at the top of each)"
CAUGHT_BY = {
    ("1.0", "wrong_ring_sends_whole_tensor"): {"Q3: what each rank sends in a ring all-reduce",
                                               "Q5: the idle share of a pipeline"},
    ("1.1", "wrong_summed"): {MEAN},
    ("1.1", "wrong_averaged_twice"): {MEAN},
    ("1.1", "wrong_averages_a_copy"): {MEAN},
    ("1.1", "wrong_only_weights"): {MEAN},
    ("1.1", "wrong_reduce_to_rank0"): {MEAN},
    ("1.1", "wrong_broadcasts_a_copy"): {"after broadcast_parameters every rank holds rank 0's weights"},
    ("1.1", "wrong_broadcast_from_own_rank"): {RUNS["1.1"], "after broadcast_parameters every rank holds rank 0's weights"},
    ("1.1", "wrong_broadcast_on_rank0_only"): {RUNS["1.1"], "every rank calls the same collectives (none inside `if rank == 0`)"},
    ("1.1", "wrong_frozen_crashes"): {"a frozen parameter (no gradient) is left alone, without an error"},
    ("1.1", "wrong_zeros_for_the_frozen_too"): {"a frozen parameter (no gradient) is left alone, without an error"},
    ("1.1", "wrong_skips_missing_gradients"): {
        "a parameter unused on some ranks gets the mean over all ranks, zero where it had no gradient"},
    ("1.2", "wrong_gather_to_rank0"): {RING},
    ("1.2", "wrong_direct_exchange"): {RING},
    ("1.2", "wrong_builtin"): {"only point-to-point messages: no built-in collective"},
    ("1.2", "wrong_even_chunks"): {SUM},
    ("1.2", "wrong_sends_before_receiving"): {RUNS["1.2"]},
    ("1.3", "wrong_backward_only_on_last_rank"): {GRADIENTS, GPIPE},  # no gradient back: two symptoms
    ("1.3", "wrong_received_without_grad"): {RUNS["1.3"], GRADIENTS},
    ("1.3", "wrong_loss_not_divided"): {GRADIENTS},
    ("1.3", "wrong_returns_loss_divided_twice"): {"the last rank returns the loss of the whole batch, equal to the unsplit model's"},
    ("1.3", "wrong_returns_sum_of_losses"): {"the last rank returns the loss of the whole batch, equal to the unsplit model's"},
    ("1.3", "wrong_whole_batch_at_once"): {GPIPE},
    ("1.3", "wrong_backward_after_each_forward"): {GPIPE},
    ("1.3", "wrong_stage_interleaved"): {STAGES},
    ("1.3", "wrong_stage_drops_remainder"): {STAGES},
    ("1.3", "wrong_stage_whole_model"): {STAGES},
    ("1.3", "wrong_stage_remainder_on_last"): {STAGES},
    ("1.3", "wrong_buffer_shaped_like_the_input"): {RUNS["1.3"]},
    ("1.4", "wrong_plain_all_reduce"): {TP_GRADIENTS},
    ("1.4", "wrong_no_f"): {TP_GRADIENTS},
    ("1.4", "wrong_no_g"): {TP_OUTPUT},
    ("1.4", "wrong_differentiable_all_reduce"): {TP_GRADIENTS, TP_COMMUNICATION},  # an all-reduce too many
    ("1.4", "wrong_f_and_g_swapped"): {TP_OUTPUT, TP_GRADIENTS},  # a wrong forward has wrong gradients
    ("1.4", "wrong_second_weight_by_columns"): {TP_SHARDS},
    ("1.4", "wrong_rows_do_not_match"): {TP_SHARDS},
    ("1.5", "wrong_forgets_the_optimizer"): {ADAM},
    ("1.5", "wrong_one_moment"): {ADAM},
    ("1.5", "wrong_pipeline_even_split"): {MEMORY},
    ("1.5", "wrong_tensor_splits_every_bias"): {MEMORY},
    ("1.5", "wrong_data_sends_everything_to_rank0"): {"bytes sent per step by the busiest rank: data parallelism (a ring all-reduce of the gradients)"},
    ("1.5", "wrong_pipeline_one_direction"): {"bytes sent per step by the busiest rank: pipeline parallelism"},
    ("1.5", "wrong_tensor_forward_only"): {"bytes sent per step by the busiest rank: tensor parallelism"},
    ("1.5", "wrong_forgets_the_biases"): {MEMORY},
    ("1.5", "wrong_ring_reduce_scatter_only"): {"bytes sent per step by the busiest rank: data parallelism (a ring all-reduce of the gradients)"},
    **{("2.5", name): {check} for name, check in BUGS.items()},
    ("2.6", "wrong_no_broadcast"): {"after construction every rank holds rank 0's weights"},
    ("2.6", "wrong_summed"): {OVERLAP_MEAN},
    ("2.6", "wrong_not_copied_back"): {OVERLAP_MEAN},
    ("2.6", "wrong_buckets_in_forward_order"): {BUCKETS},
    ("2.6", "wrong_bucket_size_ignored"): {BUCKETS},
    ("2.6", "wrong_one_all_reduce_per_parameter"): {BUCKETS},
    ("2.6", "wrong_pending_not_reset"): {BUCKETS},
    ("2.6", "wrong_waits_for_all_gradients"): {OVERLAP},
    ("2.6", "wrong_blocking_all_reduce_in_hook"): {OVERLAP},
    ("2.6", "wrong_waits_in_the_hook"): {OVERLAP},
    ("2.6", "wrong_waits_on_rank0_for_a_bucket_rank1_never_started"): {RUNS["2.6"]},
    ("2.7", "wrong_all_reduces_at_once"): {NO_COMPUTATION},
    ("2.7", "wrong_zero_everywhere"): {NO_COMPUTATION, SLOW_COMPUTATION, "the exposed time equals the schedule's on schedules in between"},
    ("2.7", "wrong_one_latency_per_step"): {NO_COMPUTATION},
    ("2.7", "wrong_buckets_in_forward_order"): {SLOW_COMPUTATION},
    ("2.7", "wrong_from_the_start_of_backward"): {SLOW_COMPUTATION},
    ("2.7", "wrong_ready_in_forward_order"): {SLOW_COMPUTATION},
    ("3.7", "wrong_whole_tensors"): {ZERO_SHARE},
    ("3.7", "wrong_all_reduces_the_gradients"): {"the gradients are reduce-scattered (each rank receives its share's sum), "
                                                 "not all-reduced"},
    ("3.7", "wrong_moments_for_every_element"): {"each rank keeps Adam's moments for its own share only, equal to full "
                                                 "Adam's there"},
    ("3.7", "wrong_full_adam_on_every_rank"): {"each rank keeps Adam's moments for its own share only, equal to full "
                                               "Adam's there"},
    ("3.7", "wrong_summed_gradients"): {"after every step every rank's parameters equal DDP with Adam"},
    ("3.7", "wrong_no_all_gather"): {"the updated shares reach every rank by an all-gather"},
    ("3.8", "wrong_built_on_cpu"): {TOWER_FITS},
    ("3.8", "wrong_to_empty_before_sharding"): {TOWER_FITS},
    ("3.8", "wrong_broadcast_all_at_once"): {TOWER_FITS},
    ("3.8", "wrong_hides_the_whole_model_from_the_measurement"): {TOWER_FITS},
    ("3.8", "wrong_initialised_not_loaded"): {"after build, every rank's shards hold exactly the checkpoint's weights"},
    ("3.8", "wrong_no_broadcast_from_rank0"): {RUNS["3.8"]},
    ("3.8", "wrong_bfloat16_compute"): {"training the built model equals plain Adam on one process, from the "
                                        "checkpoint's weights"},
    ("3.8", "wrong_reshard_ignored"): {TOWER_RESHARD},
    ("3.8", "wrong_reshard_on_root_only"): {TOWER_RESHARD},
    ("3.8", "wrong_root_only"): {"build returns the Tower, fully_shard on every block and then the root, each rank "
                                 "storing about 1/W"},
    ("3.8", "wrong_prediction_forgets_the_root"): {TOWER_PREDICTION},
    ("3.8", "wrong_prediction_fits_without_resharding"): {TOWER_PREDICTION},
    ("3.8", "wrong_reshard_on_the_root_too"): {"reshard_after_forward reaches every block and not the root: with False each "
                                              "block stays gathered from forward to backward"},
    # Gradients read before their all-reduce was waited for are not judged as the mean: the waits are charged,
    # once; what else is wrong shows once the code waits.
    ("2.6", "wrong_no_wait"): {"every all-reduce is waited for before finish_gradient_synchronization returns"},
    ("2.6", "wrong_never_waits_nor_copies_back"): {"every all-reduce is waited for before finish_gradient_synchronization returns"},
    ("2.6", "wrong_one_all_reduce_after_backward"): {BUCKETS, OVERLAP},
    ("3.0", "wrong_zero1_shards_gradients"): {"Q1: training state per rank under ZeRO stage 1"},
    ("4.0", "wrong_restart_count_as_epoch"): {"Q4: the epoch a restarted job resumes at"},
    ("3.1", "wrong_mean_of_means"): {BN_OUTPUT},
    ("3.1", "wrong_pooled_variances"): {BN_OUTPUT},
    ("3.1", "wrong_normalizes_with_unbiased_variance"): {BN_OUTPUT},
    ("3.1", "wrong_biased_running_variance"): {BN_RUNNING},
    ("3.1", "wrong_running_statistics_on_rank0_only"): {BN_RUNNING},
    ("3.1", "wrong_plain_all_reduce"): {"the gradient of the input equals global batch norm's"},
    ("3.1", "wrong_one_all_reduce_per_statistic"): {"one collective per forward pass, not one per statistic"},
    ("3.1", "wrong_eps_outside_sqrt"): {BN_OUTPUT},
    ("3.2", "wrong_converts_after_wrapping"): {SYNCED},
    ("3.2", "wrong_never_destroys_the_group"): {"process group destroyed at the end"},
    ("3.2", "wrong_first_layer_only"): {SYNCED, *BN_GLOBAL},  # one layer unsynchronized: training differs
    ("3.2", "wrong_pytorch_class_on_cpu"): {RUNS["3.2"]},
    ("3.2", "wrong_every_rank_saves"): {"exactly one checkpoint writer: global rank 0"},
    ("3.2", "wrong_saves_before_training"): {
        "the checkpoint loads strictly into a plain BNNet and holds the trained weights and running statistics"},
    ("3.3", "wrong_plain_adam"): {"Adam's state is sharded: each parameter's moments on exactly one rank"},
    ("3.3", "wrong_default_learning_rate"): {"every step equals plain Adam on one process over the global batch"},
    ("3.3", "wrong_consolidates_on_rank0_only"): {RUNS["3.3"]},
    # the save raises on rank 0, which then has no checkpoint to load
    ("3.3", "wrong_saves_without_consolidating"): {CONSOLIDATED, ZERO_MODEL, ZERO_OPTIMIZER},
    ("3.3", "wrong_saves_local_shard"): {ZERO_OPTIMIZER},
    ("3.3", "wrong_every_rank_saves"): {CONSOLIDATED},
    ("3.3", "wrong_last_rank_saves"): {CONSOLIDATED},  # the checkpoint itself is right: charged once
    ("3.3", "wrong_saves_wrapper"): {ZERO_MODEL},
    ("3.4", "wrong_optimizer_before_sharding"): {
        "every step equals plain Adam on one process over the global batch (to float rounding)"},
    ("3.4", "wrong_root_only"): {"fully_shard on every block, then on the root"},
    ("3.4", "wrong_blocks_only"): {"fully_shard on every block, then on the root"},
    ("3.4", "wrong_gathers_on_rank0_only"): {RUNS["3.4"]},
    ("3.4", "wrong_saves_sharded_state_dict"): {"the checkpoint holds the full trained weights and loads into a plain MLP"},
    ("3.4", "wrong_every_rank_saves"): {"exactly one checkpoint writer: rank 0"},
    ("3.4", "wrong_last_rank_saves"): {"exactly one checkpoint writer: rank 0"},
    ("3.4", "wrong_root_before_blocks"): {RUNS["3.4"]},
    ("3.5", "wrong_model_only"): {"resumed at each new world size, training continues exactly as one uninterrupted run"},
    ("3.5", "wrong_saves_on_rank0_only"): {RUNS["3.5"]},
    ("3.5", "wrong_full_state_dict"): {"each checkpoint holds one shard file per rank, none of them most of the state"},
    ("3.5", "wrong_full_state_dict_on_every_rank"): {"each checkpoint holds one shard file per rank, none of them most of the state"},
    ("3.5", "wrong_async_save_not_waited"): {RUNS["3.5"], "each checkpoint holds one shard file per rank, none of them most of the state"},
    ("3.5", "wrong_load_into_empty_dicts"): {"resumed at each new world size, training continues exactly as one uninterrupted run"},
    ("3.6", "wrong_adam_counted_once"): {MOMENTS},
    ("3.6", "wrong_zero1_even_split"): {MOMENTS},
    ("3.6", "wrong_zero1_shards_gradients"): {"gradients per rank: like the parameters they belong to"},
    ("3.6", "wrong_fsdp_full_gradients"): {"gradients per rank: like the parameters they belong to"},
    ("3.6", "wrong_fsdp_ignores_rows"): {  # one wrong rule for the parameters: gradients and moments follow it
        "parameters per rank: whole under DDP and ZeRO-1, each tensor's rows cut in W under FSDP"},
    # a wrong share is charged once: the model is judged on the batches the ranks drew
    ("4.1", "wrong_local_rank_argument"): {SHARE, "exactly one writer in every launch: global rank 0"},
    ("4.1", "wrong_defaults_changed"): {"with no arguments it trains with the defaults the script had: 2 epochs, "
                                        "global batches of 16, lr 0.1, into weights.pt"},
    ("4.1", "wrong_hard_coded_world_size"): {RUNS["4.1"], SHARE, SETTINGS, SAME_MODEL},
    ("4.1", "wrong_global_batch_per_rank"): {SETTINGS, SAME_MODEL},
    ("4.1", "wrong_python_path_shuffles"): {SHARE, SAME_MODEL},
    ("4.1", "wrong_mp_spawn"): {RUNS["4.1"], "under torchrun each worker joins one process group at the rank and size torchrun gave it"},
    ("4.1", "wrong_barrier_on_rank0_only"): {RUNS["4.1"]},
    ("4.1", "wrong_sets_its_own_master_port"): {RUNS["4.1"]},
    ("4.1", "wrong_sampler_local_rank"): {SHARE},
    ("4.1", "wrong_no_set_epoch"): {SAME_MODEL},
    ("4.1", "wrong_sets_master_addr"): {"under torchrun each worker joins one process group at the rank and size torchrun gave it"},
    ("4.3", "wrong_rdzv_id_per_machine"): {RUNS["4.3"], ONE_JOB},
    ("4.3", "wrong_same_node_rank"): {RUNS["4.3"], ONE_JOB},
    ("4.3", "wrong_one_node_each"): {RUNS["4.3"], ONE_JOB},
    ("4.3", "wrong_processes_in_total"): {RUNS["4.3"], ONE_JOB},
    ("4.3", "wrong_writer_per_machine"): {JOB_WRITER},
    ("4.3", "wrong_sampler_local_rank"): {JOB_SHARE},
    ("4.3", "wrong_script_as_given"): {JOB_SHARE, JOB_WRITER},
    ("4.3", "wrong_batch_local_world"): {JOB_MODEL},
    ("4.3", "wrong_sets_master_addr"): {ONE_JOB},
    # 4.4's planted bugs one at a time, each named by its symptom (given_buggy.py has all four)
    ("4.4", "wrong_writer_from_local_rank_flag"): {SNAPSHOT_WRITER},
    ("4.4", "wrong_writer_from_local_rank_env"): {SNAPSHOT_WRITER},
    ("4.4", "wrong_optimizer_not_restored"): {BIT_FOR_BIT},
    ("4.4", "wrong_no_set_epoch"): {ORDER},
    ("4.4", "wrong_snapshot_in_place"): {RUNS["4.4"], ATOMIC},
    ("4.4", "wrong_schedule_dropped"): {"the uninterrupted job trains what the script trains: its weights equal the course's run of it"},
    ("4.4", "wrong_schedule_counts_from_the_resume"): {BIT_FOR_BIT},
    # 4.5: what a smaller group cannot go on with, each told by what the training did
    ("4.5", "wrong_noise_of_each_rank"): {ANY_SIZE},
    ("4.5", "wrong_noise_rows_in_blocks"): {ANY_SIZE},
    ("4.5", "wrong_momentum_not_restored"): {ANY_SIZE},
    ("4.5", "wrong_global_rng_not_saved"): {ANY_SIZE},
    ("4.5", "wrong_no_noise"): {"every input still carries its noise"},
    ("4.5", "wrong_whole_batch_on_every_rank"): {"each rank trains on its own share of every step's global batch"},
    ("4.5", "wrong_place_in_own_samples"): {STEPS_LEFT},
    ("4.5", "wrong_resumes_from_the_start"): {STEPS_LEFT},
    # 4.6: each mistake of a batch script or of surviving a preemption, by what the job on Slurm did
    ("4.6", "wrong_task_per_worker"): {RUNS["4.6"], SLURM_AGENTS},
    ("4.6", "wrong_endpoint_localhost"): {"the rendezvous is at the job's first node, with the c10d backend"},
    ("4.6", "wrong_fixed_rdzv_id"): {"the rendezvous id is the job's id, $SLURM_JOB_ID"},
    ("4.6", "wrong_no_requeue"): {"preempted, the job goes back in the queue: --requeue"},
    ("4.6", "wrong_no_sigterm_handler"): {SLURM_SIGTERM},
    ("4.6", "wrong_stops_without_snapshot"): {SLURM_SIGTERM},
    ("4.6", "wrong_no_resume"): {"after the preemption the job goes on from its snapshot and ends with an uninterrupted "
                                 "run's weights"},
    ("4.2", "wrong_drops_the_noise"): {"the uninterrupted run trains as the script handed out: its noise and its learning-rate schedule"},
    ("4.2", "wrong_drops_the_schedule"): {"the uninterrupted run trains as the script handed out: its noise and its learning-rate schedule"},
    ("4.2", "wrong_no_resume"): {LOADS, TWICE},
    ("4.2", "wrong_resume_weights_only"): {BIT_FOR_BIT},
    ("4.2", "wrong_no_scheduler_state"): {BIT_FOR_BIT},
    ("4.2", "wrong_noise_not_restored"): {BIT_FOR_BIT},
    ("4.2", "wrong_noise_of_rank_0_everywhere"): {BIT_FOR_BIT},
    ("4.2", "wrong_resume_at_epoch_start"): {TWICE, BIT_FOR_BIT},
    ("4.2", "wrong_skips_batches_every_epoch"): {BIT_FOR_BIT},
    ("4.2", "wrong_snapshot_every_epoch"): {EVERY_K},
    ("4.2", "wrong_set_epoch_counts_from_the_resume"): {BIT_FOR_BIT},
    ("4.2", "wrong_every_rank_writes"): {"snapshots written by one rank: global rank 0"},
    ("4.2", "wrong_writer_local_rank"): {"snapshots written by one rank: global rank 0"},
    ("4.2", "wrong_reads_before_written"): {"every rank reads a snapshot only once rank 0 has finished writing it"},
    ("4.2", "wrong_moved_from_system_temp"): {RUNS["4.2"], "a snapshot is written atomically: a kill during the write leaves the last one whole"},
    ("4.2", "wrong_written_in_place"): {RUNS["4.2"], "a snapshot is written atomically: a kill during the write leaves the last one whole"},
    ("2.0", "wrong_broadcast_each_step"): {"Q1: how DDP keeps the replicas identical",
                                           "Q4: samples in one optimizer step"},
    ("2.1", "wrong_rank_as_local_rank"): {"rank, local rank and world size come from the launcher's environment"},
    ("2.1", "wrong_nccl_on_cpu"): {RUNS["2.1"], "backend: gloo on CPUs, nccl on GPUs"},
    ("2.1", "wrong_swapped_return"): {"rank, local rank and world size come from the launcher's environment"},
    ("2.1", "wrong_ranks_as_strings"): {"rank, local rank and world size come from the launcher's environment"},
    ("2.1", "wrong_setup_joins_nothing"): {"process group initialized when setup() returns"},
    ("2.1", "wrong_fixed_port"): {RUNS["2.1"], "rendezvous through the launcher's environment (no hard-coded address or port)"},
    ("2.1", "wrong_no_sampler"): {"each epoch the ranks' samples are disjoint and cover the dataset"},
    ("2.1", "wrong_shuffle_beside_sampler"): {RUNS["2.1"], "no shuffle=True beside the sampler"},
    ("2.1", "wrong_sampler_unshuffled"): {"the order changes every epoch once set_epoch is called"},
    ("2.1", "wrong_batch_times_world_size"): {"batches of batch_size samples on every rank"},
    ("2.1", "wrong_one_replica"): {"each epoch the ranks' samples are disjoint and cover the dataset"},
    ("2.2", "wrong_no_set_epoch"): {ORDER_2_2},
    ("2.2", "wrong_sampler_unshuffled"): {ORDER_2_2},
    ("2.2", "wrong_set_epoch_zero"): {ORDER_2_2},
    ("2.2", "wrong_set_epoch_after_the_epoch"): {ORDER_2_2},
    ("2.2", "wrong_batch_times_world_size"): {"each process's batch is BATCH_SIZE samples"},
    ("2.2", "wrong_barrier_before_backward_on_rank0"): {RUNS["2.2"], "every rank calls the same collectives (none inside `if rank == 0`)"},
    ("2.2", "wrong_every_rank_saves"): {"exactly one checkpoint writer: global rank 0"},
    ("2.2", "wrong_saves_wrapper"): {"checkpoint keys have no 'module.' prefix and load strictly into the plain model"},
    ("2.2", "wrong_no_sampler"): {"each epoch the ranks' samples are disjoint and cover the dataset"},
    ("2.2", "wrong_no_destroy"): {"process group destroyed at the end"},
    ("2.2", "wrong_shuffle_beside_sampler"): {RUNS["2.2"]},
    ("2.2", "wrong_manual_sum_allreduce"): {"model wrapped in DistributedDataParallel",
                                            "equal to the single-process reference trained on the same global batches"},
    ("2.2", "wrong_barrier_on_rank0_only"): {RUNS["2.2"], "every rank calls the same collectives (none inside `if rank == 0`)"},
    ("2.2", "wrong_barrier_on_rank0_at_three_ranks"): {RUNS["2.2"], "every rank calls the same collectives (none inside `if rank == 0`)"},
    ("2.2", "wrong_saves_on_local_rank0"): {"exactly one checkpoint writer: global rank 0"},
    ("2.2", "wrong_last_rank_saves"): {"exactly one checkpoint writer: global rank 0"},
    ("2.2", "wrong_no_sampler_lr_scaled"): {"each epoch the ranks' samples are disjoint and cover the dataset",
                                            "equal to the single-process reference trained on the same global batches"},
    ("2.3", "wrong_local_only"): {"every rank returns the same accuracy", "accuracy equals the single-process accuracy"},
    ("2.3", "wrong_mean_of_accuracies"): {"accuracy equals the single-process accuracy"},
    ("2.3", "wrong_sampler_padding"): {"every sample scored exactly once across the ranks"},
    ("2.3", "wrong_reduce_on_rank0_only"): {RUNS["2.3"], "every rank calls the same collectives (none inside `if rank == 0`)"},
    ("2.3", "wrong_all_reduce_per_batch"): {RUNS["2.3"], "every rank calls the same collectives (none inside `if rank == 0`)"},
    ("2.3", "wrong_rank0_scores_all"): {"every rank scores its own share of the samples"},
    ("2.3", "wrong_returns_a_tensor"): {"returns a number on every rank"},
    ("2.4", "wrong_no_no_sync"): {"gradients all-reduced once per window, on its last micro-batch (no_sync for the others)"},
    ("2.4", "wrong_always_no_sync"): {"gradients all-reduced once per window, on its last micro-batch (no_sync for the others)"},
    ("2.4", "wrong_unscaled_loss"): {"equal to the single-process reference with the same windows"},
    ("2.4", "wrong_divides_by_accum_steps"): {"equal to the single-process reference with the same windows"},
    ("2.4", "wrong_drops_short_window"): {"one optimizer step per accumulation window"},
    ("2.4", "wrong_steps_every_micro_batch"): {"one optimizer step per accumulation window"},
    ("2.4", "wrong_manual_sum_allreduce"): {"gradients all-reduced once per window, on its last micro-batch (no_sync for the others)",
                                            "equal to the single-process reference with the same windows"},
}


def folder(exercise_id: str):
    return SUBMISSIONS / f"ex{exercise_id.replace('.', '_')}"


def names(exercise_id: str, prefix: str) -> list[str]:
    """The submissions of an exercise: whole files, and controls written as edits of a correct one."""
    files = [path.stem for path in folder(exercise_id).glob(f"{prefix}*.py")]
    return sorted(files + [n for n in edits.mistakes(folder(exercise_id)) if n.startswith(prefix)])


def submissions(prefix: str):
    return [pytest.param(ex, name, id=f"{ex}-{name}") for ex in exercises.ids() for name in names(ex, prefix)]


_hosts = {}


@pytest.fixture(scope="module", autouse=True)
def warm_hosts(tmp_path_factory):
    """One grader's sandboxed rank hosts for the course's own submissions here, as a student's notebook keeps.

    These submissions are benign; how each grading stands alone against hostile ones is
    test_hostile.py's concern, where every submission gets hosts of its own.
    """
    _hosts["dest"] = tmp_path_factory.mktemp("controls")
    with engine.Hosts("auto") as hosts:
        for hidden in {exercises.hidden(ex) for ex in exercises.ids()}:
            hosts.get(hidden)  # started here, not in the first test that needs one: no test sees it start
        _hosts["warm"] = hosts
        yield


@functools.cache
def graded(exercise_id: str, name: str, seed: int = 0):
    if exercises.get(exercise_id).jobs_of is ex4_6.job_of and name != "not_started" and slurm_missing():
        pytest.skip(f"4.6's Slurm cannot run here: {slurm_missing()}")
    path = folder(exercise_id) / f"{name}.py"
    if not path.exists():  # a control written as an edit
        path = edits.write(folder(exercise_id), name, _hosts["dest"])
    return engine.grade(exercise_id, path, seed=seed, hosts=_hosts["warm"])


def test_every_wrong_submission_is_listed():
    on_disk = {(p.values[0], p.values[1]) for p in submissions("wrong_")}
    assert on_disk == set(CAUGHT_BY)


def test_every_exercise_has_two_correct_solutions_and_a_negative_control():
    for ex in exercises.ids():
        assert len(names(ex, "correct_")) >= 2, ex
        assert names(ex, "wrong_"), ex


@pytest.mark.parametrize("exercise_id,name", submissions("correct_"))
def test_correct_solution_passes_every_check(exercise_id, name, no_leftover_processes):
    report = graded(exercise_id, name)
    assert report.all_passed, report.to_text()
    if exercises.kind(exercise_id) == "answers":  # read from the cell, never run
        assert report.world_sizes == [] and report.backend == "none"
    else:
        assert report.world_sizes == list(exercises.get(exercise_id).world_sizes)
        assert report.backend == "gloo"
    assert report.score == report.max_score > 0
    skipped = [c for c in report.checks if c.status == "skipped"]
    # skipped: what needs a GPU, or (1.5 graded alone) the student's other cells
    assert all(("GPU" in c.message or c.name == OWN) and c.points == 0 for c in skipped)


@pytest.mark.parametrize("exercise_id,name", submissions("correct_"))
def test_correct_solution_passes_on_other_data(exercise_id, name):
    if exercises.get(exercise_id).kind == "script":
        pytest.skip("a script fixes its own data")
    report = graded(exercise_id, name, seed=7)
    assert report.all_passed, report.to_text()


@pytest.mark.parametrize("exercise_id,name", submissions("wrong_"))
def test_wrong_submission_fails_exactly_the_checks_that_name_its_mistake(exercise_id, name, no_leftover_processes):
    report = graded(exercise_id, name)
    failed = {c.name for c in report.checks if c.status == "failed"}
    assert failed == CAUGHT_BY[(exercise_id, name)], report.to_text()
    for check in report.checks:
        if check.name in failed:
            assert check.points == 0 and check.message
        elif check.status in ("error", "timeout"):  # left unjudged by a crash or a hang, and saying so
            assert check.message.startswith(("not judged", "held at")) and RUNS.get(exercise_id) in failed
            assert check.points < check.max_points
    assert not report.all_passed and report.score < report.max_score


@pytest.mark.parametrize("exercise_id", [ex for ex in exercises.ids() if exercises.get(ex).entry != "ANSWERS"])
def test_not_started_says_so_instead_of_a_wall_of_errors(exercise_id):
    report = graded(exercise_id, "not_started")
    assert report.not_started
    assert report.score == 0
    assert "not implemented yet" in report.problem
    assert "Traceback" not in report.to_text()
    assert {c.status for c in report.checks} <= {"failed", "skipped"}


def test_a_crash_shows_the_failing_ranks_traceback_in_the_students_terms():
    report = graded("2.1", "wrong_nccl_on_cpu")
    assert report.problem.startswith("world size 1: rank 0 raised RuntimeError")
    assert 'File "exercise cell", line 10, in setup' in report.problem
    assert "autograder" not in report.problem


def test_a_receive_into_a_buffer_of_another_size_names_both_lines():
    report = graded("1.3", "wrong_buffer_shaped_like_the_input")
    seen = re.search(r"Message 1 from rank 0 to rank 1: rank 0 sent (\d+) bytes \(exercise cell line \d+, in "
                     r"pipeline_step\), rank 1 received into a buffer of (\d+) bytes \(exercise cell line \d+", report.problem)
    assert seen and seen[1] != seen[2], report.problem


@pytest.mark.parametrize("exercise_id,name", [("2.3", "wrong_reduce_on_rank0_only"),
                                              ("2.2", "wrong_barrier_on_rank0_only")])
def test_a_collective_on_rank_0_only_is_reported_as_a_hang_in_seconds(exercise_id, name):
    report = graded(exercise_id, name)
    assert "deadlock: rank 0 in " in report.problem and "call every collective on every rank" in report.problem.lower()
    assert "exercise cell line" in report.problem
    assert {c.status for c in report.checks} <= {"timeout", "failed", "skipped"}
    assert report.elapsed < 15


def test_a_launch_that_hangs_at_one_world_size_costs_the_checks_their_share_at_that_size():
    report = graded("2.2", "wrong_barrier_on_rank0_at_three_ranks")
    assert report.problem.startswith("world size 3: deadlock: rank 0 in barrier #1"), report.problem
    checks = {c.name: c for c in report.checks}
    assert checks[RUNS["2.2"]].points == 0
    held = checks["model wrapped in DistributedDataParallel"]
    # world sizes 2 and 3 count (one process shows no distributed mistake): held at 2, not judged at 3
    assert held.status == "timeout" and held.points == held.max_points / 2, held
    assert held.message.startswith("held at world size 2; not judged at world size 3"), held.message
    stopped_everywhere = graded("2.2", "wrong_barrier_on_rank0_only")
    assert all(c.points == 0 for c in stopped_everywhere.checks if c.status == "timeout")


def test_a_killed_job_that_never_finished_earns_nothing_for_its_final_weights_and_the_others_their_share():
    report = graded("4.2", "wrong_written_in_place")  # the restart cannot load the torn snapshot, and crashes
    check = {c.name: c for c in report.checks}[BIT_FOR_BIT]
    killed = [j for j in exercises.get("4.2").jobs if j.fault is not None]
    assert check.status == "error" and check.message.startswith("held at") and "not judged at" in check.message, check
    assert check.points == round(check.max_points * (len(killed) - 1) / len(killed), 2), check


def test_the_hint_of_a_launch_that_did_not_complete_fits_how_it_ended():
    runs = {c.name: c for c in graded("2.2", "wrong_barrier_on_rank0_only").checks}[RUNS["2.2"]]
    assert "Hint: A collective returns only once every rank has called it" in runs.message, runs.message
    assert runs.hints["section"] == "Every rank calls every collective, in the same order" and runs.hints["lesson"] == "1"
    assert "Your code: barrier at exercise cell line" in runs.hints["where"], runs.hints
    crash = {c.name: c for c in graded("2.1", "wrong_nccl_on_cpu").checks}[RUNS["2.1"]]
    assert "Hint: A rank ended with an error of its own" in crash.message and "because it was gone" not in crash.message, crash.message


def test_ddps_own_gradient_all_reduce_is_never_told_as_the_codes():
    once = "gradients all-reduced once per window, on its last micro-batch (no_sync for the others)"
    ddp_every_micro_batch = {c.name: c for c in graded("2.4", "wrong_no_no_sync").checks}[once]
    by_hand = {c.name: c for c in graded("2.4", "wrong_manual_sum_allreduce").checks}[once]
    assert "itself" not in ddp_every_micro_batch.message, ddp_every_micro_batch.message
    assert "the code all-reduced gradients itself" in by_hand.message, by_hand.message


def test_a_sampler_numbered_from_the_resume_is_told_as_such_not_as_a_resume_at_the_wrong_epoch():
    check = {c.name: c for c in graded("4.2", "wrong_set_epoch_counts_from_the_resume").checks}[BIT_FOR_BIT]
    assert "took the 12 steps left, but its sampler drew the order of epoch 0" in check.message, check.message
    assert "go on in the epoch" not in check.message


@pytest.mark.parametrize("name, cause", [
    ("wrong_no_scheduler_state", "the learning-rate schedule did not go on where it was"),
    ("wrong_noise_not_restored", "rank 0's generator did not go on where it was"),
    ("wrong_noise_of_rank_0_everywhere", "rank 1's generator did not go on where it was"),
    ("wrong_skips_batches_every_epoch", "the restart did not go on at the snapshot's place in the data"),
    ("wrong_resume_at_epoch_start", "the restart did not go on at the snapshot's place in the data"),
    ("wrong_resume_weights_only", "the optimizer's param_groups, which hold the learning rate"),
])
def test_a_resume_that_parts_from_the_uninterrupted_run_is_told_by_what_its_step_was_given(name, cause):
    check = {c.name: c for c in graded("4.2", name).checks}[BIT_FOR_BIT]
    assert cause in check.message, check.message


def test_a_rank_in_a_barrier_while_another_is_in_ddps_backward_is_a_deadlock_told_in_seconds():
    report = graded("2.2", "wrong_barrier_before_backward_on_rank0")
    assert re.search(r"deadlock: rank 0 in barrier #1 \(exercise cell line \d+, in main\), rank 1 in DDP's gradient "
                     r"all-reduce in backward\(\) #1 \(exercise cell line \d+, in main\)", report.problem), report.problem
    assert report.elapsed < 15


def test_the_mean_of_accuracies_is_really_different_from_the_accuracy():
    # the negative control only means something if the data make the two numbers differ
    report = graded("2.3", "wrong_mean_of_accuracies")
    message = {c.name: c for c in report.checks}["accuracy equals the single-process accuracy"].message
    assert "world size 2" in message


def test_a_swapped_return_tuple_is_named_as_such():
    report = graded("2.1", "wrong_swapped_return")
    assert "in another order" in report.to_text() and "local rank 1" not in report.to_text()


def test_summed_gradients_are_named_as_such():
    report = graded("2.4", "wrong_manual_sum_allreduce")
    assert "summed, not averaged" in report.to_text()


QUIZZES = {"1.0": "01_parallelism.ipynb", "2.0": "02_ddp_basics.ipynb", "3.0": "03_syncbn_sharding.ipynb",
           "4.0": "04_torchrun.ipynb"}


def quiz(exercise_id: str):
    import importlib

    return importlib.import_module(f"autograder.exercises.ex{exercise_id.replace('.', '_')}")


@pytest.mark.parametrize("exercise_id", QUIZZES)
def test_unanswered_questions_score_nothing_and_say_so(exercise_id):
    report = graded(exercise_id, "not_started")
    assert report.score == 0
    assert all("not answered yet" in c.message for c in report.checks)


@pytest.mark.parametrize("exercise_id", QUIZZES)
def test_quiz_check_names_do_not_give_the_answers_away(exercise_id):
    module = quiz(exercise_id)
    for key, (name, _) in module.QUESTIONS.items():
        words = name.lower().replace(":", " ").replace("(", " ").replace(")", " ").split()
        assert not any(module.digest(key, word) in module.ACCEPTED[key] for word in words), name


@pytest.mark.parametrize("exercise_id,plain", [("2.0", ['"gloo"', "'gloo'", '"32"']),
                                               ("1.0", ['"16"', '"150"', '"300"', '"3/7"']),
                                               ("3.0", ['"70"', '"129"', '"12"']),
                                               ("4.0", ['"4"', '"6"'])])
def test_the_answer_key_is_not_in_the_package_in_plain(exercise_id, plain):
    text = Path(quiz(exercise_id).__file__).read_text()
    assert not [p for p in plain if p in text]


def choice_items() -> list[tuple[str, str, dict[str, str], str]]:
    """Every multiple-choice item of every concept check: (key, question, options by letter, the right letter)."""
    import re

    items = []
    for exercise_id, notebook in QUIZZES.items():
        module = quiz(exercise_id)
        cells = json.loads((ROOT / "solutions" / notebook).read_text())["cells"]
        task = f"task_{exercise_id.replace('.', '_')}"
        text = next("".join(c["source"]) for c in cells if c["metadata"].get("nbgrader", {}).get("grade_id") == task)
        for key, block in re.findall(r'\*\*Q\d \(`"(\w+)"`\)\.\*\*(.*?)(?=\*\*Q\d|\Z)', text, re.S):
            options = {k: " ".join(v.split()) for k, v in
                       re.findall(r"^- ([a-d])\) (.*?)(?=^- [a-d]\)|\Z)", block, re.S | re.M)}
            if options:  # else a number or a name
                right = [letter for letter in options if module.digest(key, letter) in module.ACCEPTED[key]]
                assert len(right) == 1, key
                items.append((key, re.split(r"^- a\)", block, flags=re.M)[0], options, right[0]))
    return items


def _words(text: str) -> set[str]:
    import re

    return set(re.findall(r"[a-z_]+", text.lower()))


# Ways to answer without the lessons: each picks, for an item, the options it prefers (ties share the pick).
GUESSES = {
    "the longest option": lambda question, options: _ties(options, lambda o: len(o)),
    "the shortest option": lambda question, options: _ties(options, lambda o: -len(o)),
    "the option sharing most words with the question":
        lambda question, options: _ties(options, lambda o: len(_words(o) & _words(question))),
    "the option that hedges (may, can, usually...)":
        lambda question, options: _ties(options, lambda o: len(_words(o) & {"may", "might", "can", "usually",
                                                                              "typically", "often", "depends"})),
    "the option without always, never, only, every...":
        lambda question, options: _ties(options, lambda o: -len(_words(o) & {"always", "never", "only", "every",
                                                                               "all", "none", "cannot", "must"})),
    **{f"always option {letter}": (lambda question, options, letter=letter: {letter}) for letter in "abcd"},
}


def _ties(options: dict[str, str], score) -> set[str]:
    best = max(score(o) for o in options.values())
    return {letter for letter, o in options.items() if score(o) == best}


@pytest.mark.parametrize("guess", GUESSES)
def test_no_way_of_guessing_without_the_lessons_beats_chance_on_the_concept_checks(guess):
    """Over every multiple-choice item of the course, a student who never read the lessons and picks by the
    form of the options (its length, its words, its position) scores no better than a third."""
    items = choice_items()
    assert len(items) >= 12
    expected = sum(len({right} & picked) / len(picked) for _, question, options, right in items
                   for picked in [GUESSES[guess](question, options)])
    assert expected / len(items) <= 1 / 3, f"{guess}: {expected:.1f} of {len(items)} items"


def test_the_report_draws_a_pipeline_run_rank_by_rank():
    report = graded("1.3", "correct_blocking")
    drawn = Timeline.from_dict(report.timeline)
    assert drawn.title == "Your run at world size 3" and len(drawn.rows) == 3
    for rank, row in enumerate(drawn.rows):
        kinds = [s.kind for s in row if s.kind in ("forward", "backward")]
        assert kinds == ["forward"] * 4 + ["backward"] * 4, (rank, kinds)  # GPipe, as the ranks ran it
    text = report.to_text()
    assert "Your run at world size 3 (one column = " in text and "  rank 2  " in text and "F forward" in text
    assert "<svg" in report._repr_html_() and Report.from_dict(report.to_dict()).timeline == report.timeline


def test_the_course_s_own_runs_are_drawn_as_such_not_as_the_students():
    report = graded("1.5", "correct_counted")
    drawn = Timeline.from_dict(report.timeline)
    assert drawn.title.startswith("The course's own run") and "own run (what your predictions" in report._repr_html_()
    assert "Your run" not in report.to_text()


def test_the_timeline_numbers_epochs_and_steps_and_says_what_to_look_for():
    report = graded("2.2", "correct_tutorial")
    drawn = Timeline.from_dict(report.timeline)
    epochs = [m["label"] for m in drawn.marks if m["kind"] == "epoch"]
    steps = [m for m in drawn.marks if m["kind"] == "step"]
    assert epochs == ["0", "1", "2"] and len(steps) == sum(s.kind == "step" for s in drawn.rows[0])
    lines = report.to_text().splitlines()
    ruler = next(line for line in lines if line.startswith("  epoch "))
    row = next(line for line in lines if line.startswith("  rank 0 "))
    assert ruler.split() == ["epoch", "0", "1", "2"] and len(ruler) <= len(row)
    assert any(line.startswith("  step ") for line in lines) and "Read it one step (s) at a time" in report.to_text()
    assert report._repr_html_().count("stroke-dasharray='2,2'") == 3  # a line where each epoch began


def test_the_timeline_of_a_hang_shows_where_each_rank_stopped():
    report = graded("1.2", "wrong_sends_before_receiving")
    drawn = Timeline.from_dict(report.timeline)
    assert all(any(s.unfinished and s.kind == "send" for s in row) for row in drawn.rows)
    assert "stuck in send #1 to rank 1" in report.to_text() and "Where each row ends is where" in report.to_text()


def handed_out(exercise_id: str, notebook: str, name: str):
    """The report on the script an exercise hands out, which its task must show as it is."""
    given = folder(exercise_id) / f"{name}.py"
    task = next(c for c in nbformat.read(ROOT / "solutions" / notebook, as_version=4).cells
                if c.metadata.get("nbgrader", {}).get("grade_id") == f"task_{exercise_id.replace('.', '_')}")
    assert f"```python\n{given.read_text().rstrip()}\n```" in task.source
    return graded(exercise_id, name)


def test_the_single_process_script_2_2_starts_from_scores_nothing_and_says_why():
    report = handed_out("2.2", "02_ddp_basics.ipynb", "given_single_process")
    assert report.score == 0
    assert report.problem.startswith("Nothing to grade: no rank joined a process group: this is still a "
                                     "single-process script"), report.problem


def test_the_script_2_5_hands_out_fails_the_checks_of_all_its_bugs_at_once():
    report = handed_out("2.5", "02_ddp_basics.ipynb", "given_buggy")
    assert {c.name for c in report.checks if c.status == "failed"} == set(BUGS.values()), report.to_text()
    # its points are the planted bugs': as handed out it earns only what it already did right
    assert report.score <= report.max_score / 6, report.to_text()
    assert report.problem.startswith(f"Planted bugs fixed: 0 of {len(BUGS)}."), report.problem
    text = report.to_text()  # symptoms, not causes nor fixes
    assert "Hint" not in text and "set_epoch" not in text and "likely cause" not in text and "To fix" not in text
    assert "rank 0" not in {c.name: c for c in report.checks}["exactly one process writes the checkpoint"].message


def test_the_script_3_2_hands_out_scores_nothing_and_says_why():
    report = handed_out("3.2", "03_syncbn_sharding.ipynb", "given_unsynchronized")
    assert report.score == 0
    assert report.problem.startswith("Nothing to grade: no batch norm layer was ever synchronized"), report.problem


def test_the_script_4_3_hands_out_is_refused_for_its_commands_and_caught_for_its_script():
    report = handed_out("4.3", "04_torchrun.ipynb", "given_one_machine")
    assert report.score == 0
    assert report.problem.startswith("The launch commands cannot run as written: machine 0's command uses "
                                     "--standalone"), report.problem
    # under right commands, its two one-machine mistakes: wrong_script_as_given in CAUGHT_BY


def test_the_scripts_4_6_hands_out_fail_every_check_of_a_cluster_and_of_a_preemption():
    report = handed_out("4.6", "04_torchrun.ipynb", "given_for_one_machine")
    failed = {c.name for c in report.checks if c.status == "failed"}
    assert failed == {RUNS["4.6"], SLURM_AGENTS, "the rendezvous is at the job's first node, with the c10d backend",
                      "the rendezvous id is the job's id, $SLURM_JOB_ID",
                      "preempted, the job goes back in the queue: --requeue", SLURM_SIGTERM}, report.to_text()
    assert report.score == 0


def test_4_6_without_the_sandbox_judges_nothing_and_says_how_to_grade_it(tmp_path):
    """Its Slurm runs only inside the sandbox, as the sandbox's own user: never on the machine itself."""
    import json
    import os
    import subprocess
    import sys

    solution = folder("4.6") / "correct_torchrun.py"
    done = subprocess.run([sys.executable, "-m", "autograder", "grade", "4.6", str(solution), "--json"],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "AUTOGRADER_SANDBOX": "off", "TMPDIR": str(tmp_path)})
    report = json.loads(done.stdout)
    assert {c["status"] for c in report["checks"]} == {"error"} and report["score"] == 0, report
    assert "a Slurm of its own, inside the sandbox" in report["problem"], report["problem"]
    assert "your work is unchanged" in report["problem"], report["problem"]


def test_the_script_4_4_hands_out_shows_the_symptoms_of_its_four_bugs_and_counts_them():
    report = handed_out("4.4", "04_torchrun.ipynb", "given_buggy")
    status = {c.name: c.status for c in report.checks}
    planted = {name for symptom in exercises.get("4.4").planted for name in symptom}
    # Two writers of one file and a kill inside one write: whether the other writer rewrites the file whole
    # before the restart is a race. When it does not, the restarted job crashes on the torn file, and the
    # bit-for-bit symptom is left unjudged by that crash (which "every job finishes" charges).
    unjudged = {name for name in planted if status[name] == "error"}
    assert planted - unjudged <= {n for n, s in status.items() if s == "failed"}, report.to_text()
    assert unjudged <= {BIT_FOR_BIT} and (not unjudged or status[RUNS["4.4"]] == "failed"), report.to_text()
    assert report.problem.startswith("Planted bugs fixed: 0 of 4."), report.problem
    assert report.score <= report.max_score / 5, report.to_text()  # its points are the planted bugs'
    one_left = graded("4.4", "wrong_no_set_epoch")
    assert one_left.problem.startswith("Planted bugs fixed: 3 of 4."), one_left.problem
    assert "Hint" not in report.to_text()  # from the symptom to the cause is the exercise
    assert "To fix" not in report.to_text() + one_left.to_text()
    assert "likely cause" not in report.to_text() and "not restored" not in report.to_text()
    told_in_4_2 = {c.name: c for c in graded("4.2", "wrong_resume_weights_only").checks}[BIT_FOR_BIT]
    assert "To fix: load optimizer.state_dict()" in told_in_4_2.message, told_in_4_2.message


def test_agents_that_never_meet_are_reported_as_a_hang_in_seconds():
    report = graded("4.3", "wrong_rdzv_id_per_machine")
    assert "no rendezvous: the agents waited 20 s" in report.problem and report.elapsed < 40
    one_job = {c.name: c for c in report.checks}[ONE_JOB]
    assert "--rdzv-id differs: machine 0 'machine0', machine 1 'machine1'" in one_job.message


def test_pytorchs_sync_batch_norm_on_cpu_is_explained_with_what_to_use_instead():
    report = graded("3.2", "wrong_pytorch_class_on_cpu")
    assert "ValueError: SyncBatchNorm layers only work with GPU modules" in report.problem
    assert "use the course's ddpcourse.convert_sync_batchnorm(model)" in report.problem


def test_fully_shard_on_the_root_before_its_blocks_is_explained_with_the_order_to_shard_in():
    report = graded("3.4", "wrong_root_before_blocks")  # PyTorch says only "Invariant encountered"
    assert "Invariant encountered" in report.problem and "Shard every block first, then the root" in report.problem


@pytest.mark.parametrize("exercise_id,name,call", [
    ("3.3", "wrong_consolidates_on_rank0_only", r"consolidate_state_dict #1 with root 0 \(exercise cell line \d+, in save_checkpoint\)"),
    ("3.4", "wrong_gathers_on_rank0_only", r"get_model_state_dict #1 \(exercise cell line \d+, in save_full\)"),
    ("3.5", "wrong_saves_on_rank0_only", r"dcp.save #1 \(exercise cell line \d+, in save\)")])
def test_saving_sharded_state_on_rank_0_only_is_reported_as_a_hang_in_seconds(exercise_id, name, call):
    report = graded(exercise_id, name)
    # rank 1 returned from the student's code and waits in the grader's own barrier: told as such
    assert re.search(rf"deadlock: rank 0 in {call}, rank 1 in the grader's barrier after your code returned",
                     report.problem), report.problem
    assert "rank(s) 1 finished your code without calling" in report.problem, report.problem
    assert report.elapsed < 15


def test_the_course_sync_batch_norm_cannot_be_imported_while_3_1_is_graded(tmp_path):
    borrowed = tmp_path / "borrowed.py"
    borrowed.write_text("from ddpcourse import CpuSyncBatchNorm\n\n\n"
                        "def sync_batch_norm(x, running_mean, running_var, weight, bias, momentum, eps):\n"
                        "    raise AssertionError('unreachable')\n")
    report = engine.grade("3.1", borrowed, hosts=_hosts["warm"])
    assert report.score == 0
    assert "ModuleNotFoundError" in report.problem or "ImportError" in report.problem, report.problem


# 1.5 beside the student's own 1.1-1.4 ---------------------------------------------------------

OWN = "your predictions against your own 1.1-1.4 code, run on 3 ranks"


def graded_with(cells: dict[str, str], notebook: str = "solutions/01_parallelism.ipynb"):
    dest = _hosts["dest"]
    paths = {}
    for exercise_id, name in cells.items():
        path = name if isinstance(name, Path) else folder(exercise_id) / f"{name}.py"
        paths[exercise_id] = path if path.exists() else edits.write(folder(exercise_id), name, dest)
    path = dest / f"notebook-{len(list(dest.glob('notebook-*')))}.ipynb"
    nbformat.write(handed_in(ROOT / notebook, {i: p.read_text() for i, p in paths.items()}), path)
    return engine.grade("1.5", path, hosts=_hosts["warm"])


def by_name(report) -> dict:
    return {c.name: c for c in report.checks}


@pytest.mark.parametrize("cells", [{}, {"1.1": "correct_flattened", "1.2": "correct_batched", "1.3": "correct_blocking",
                                       "1.4": "correct_in_place"}],
                         ids=["the course's", "other correct ones"])
def test_1_5_sets_right_predictions_beside_the_students_own_right_code(cells, no_leftover_processes):
    report = graded_with({"1.5": "correct_per_rank", **cells})
    assert report.all_passed and by_name(report)[OWN].status == "passed", report.to_text()


def test_1_5_says_when_the_students_own_ring_sends_what_their_prediction_does_not():
    report = graded_with({"1.5": "correct_counted", "1.2": "wrong_gather_to_rank0"})
    own = by_name(report)[OWN]
    assert report.score == report.max_score, report.to_text()  # 1.2's mistake is charged in 1.2 only
    assert own.status == "failed" and "data parallelism, your cell of 1.2" in own.message, own.message
    assert "you predicted the count; your code is what differs" in own.message, own.message
    assert "pipeline" not in own.message and "tensor" not in own.message, own.message


def test_1_5_says_when_a_prediction_disagrees_with_the_students_own_right_code():
    report = graded_with({"1.5": "wrong_tensor_forward_only"})
    own = by_name(report)[OWN]
    assert own.status == "failed" and "tensor parallelism, your cell of 1.4" in own.message, own.message
    assert "the count is" in own.message and "data" not in own.message, own.message


def test_1_5_graded_beside_a_deadlocking_ring_keeps_its_grade_and_says_so(no_leftover_processes):
    report = graded_with({"1.5": "correct_per_rank", "1.2": "wrong_sends_before_receiving"})
    own = by_name(report)[OWN]
    assert report.score == report.max_score, report.to_text()
    assert own.status == "failed" and "your cell of 1.2 did not finish on every rank" in own.message, own.message


def test_1_5_with_the_other_cells_as_handed_out_or_alone_skips_the_comparison():
    released = graded_with({"1.5": "correct_per_rank"}, notebook="exercises/01_parallelism.ipynb")
    alone = graded("1.5", "correct_per_rank")
    for report in released, alone:
        assert report.all_passed and by_name(report)[OWN].status == "skipped", report.to_text()
    assert "it runs when 1.5 is checked in the notebook that holds your cells" in by_name(alone)[OWN].message
    assert "are not done yet" in by_name(released)[OWN].message


def test_1_5_beside_a_cell_stuck_in_a_loop_waits_only_the_short_limit_of_that_launch(tmp_path, no_leftover_processes):
    stuck = tmp_path / "stuck.py"
    stuck.write_text("def shard_weights(A, B, rank, world_size):\n"
                     "    per = A.shape[1] // world_size\n"
                     "    return A[:, rank * per:(rank + 1) * per], B[rank * per:(rank + 1) * per]\n\n\n"
                     "def tensor_parallel_mlp(x, a, b):\n"
                     "    while True:\n"
                     "        pass\n")
    report = graded_with({"1.5": "correct_per_rank", "1.4": stuck})
    own = by_name(report)[OWN]
    assert report.score == report.max_score, report.to_text()
    assert own.status == "failed" and "your cell of 1.4 did not finish on every rank" in own.message, own.message
    assert f"time limit of {engine.OWN_CELLS_TIMEOUT:g} s" in own.message, own.message
    assert report.elapsed < exercises.get("1.5").timeout, report.elapsed


def test_1_5_says_when_the_students_own_stages_hold_more_than_predicted():
    report = graded_with({"1.5": "correct_counted", "1.3": "wrong_stage_whole_model"})
    own = by_name(report)[OWN]
    assert report.score == report.max_score, report.to_text()
    assert own.status == "failed" and "pipeline parallelism, your cell of 1.3: the busiest rank's 'parameters'" \
        in own.message, own.message
    assert "data" not in own.message and "tensor" not in own.message, own.message


def test_1_5_beside_a_cell_that_exits_when_imported_keeps_its_grade_and_says_so(tmp_path):
    exits = tmp_path / "exits.py"
    exits.write_text("import sys\n\nsys.exit(3)\n\n\ndef ring_all_reduce(tensor):\n    return tensor\n")
    report = graded_with({"1.5": "correct_per_rank", "1.2": exits})
    own = by_name(report)[OWN]
    assert report.score == report.max_score, report.to_text()
    assert own.status == "failed" and "stopped the launch before any of them ran" in own.message, own.message


@pytest.mark.parametrize("name,told", [("wrong_only_weights", "you predicted the count; your code is what differs"),
                                       ("wrong_reduce_to_rank0", "it also called dist.reduce, which is not counted here")])
def test_1_5_says_when_the_students_own_average_gradients_sends_other_than_predicted(name, told):
    report = graded_with({"1.5": "correct_counted", "1.1": name})
    own = by_name(report)[OWN]
    assert report.score == report.max_score, report.to_text()
    assert own.status == "failed" and "data parallelism, your cell of 1.1: the busiest rank's 'sent'" in own.message, \
        own.message
    assert told in own.message and "1.2" not in own.message, own.message


def lesson_cells(lesson: str) -> list[tuple[int, str]]:
    """The code cells of a lesson, as a student could paste them into an exercise cell: a %%writefile
    script as the script it writes, magics and shell lines left out."""
    cells = []
    for index, cell in enumerate(nbformat.read(ROOT / "lessons" / lesson, as_version=4).cells):
        if cell.cell_type != "code":
            continue
        text = cell.source.split("\n", 1)[1] if cell.source.startswith("%%writefile") else cell.source
        cells.append((index, "\n".join(line for line in text.splitlines() if not line.startswith(("%", "!")))))
    return cells


def _could_pass(exercise_id: str, code: str) -> bool:
    """Whether the cell can be graded as the exercise at all: a function exercise needs its entry defined;
    a script exercise, a script that joins a process group. Any other cell is refused before it runs."""
    import ast

    exercise = exercises.get(exercise_id)
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return False
    if exercise.kind == "script":
        return "init_process_group" in code and any(
            isinstance(n, ast.If) and "__main__" in ast.unparse(n.test) for n in tree.body)
    defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    return all(name in defined for name in ((exercise.entry,) if isinstance(exercise.entry, str) else exercise.entry))


@pytest.mark.parametrize("lesson,prefix", [("01_parallelism.ipynb", "1."), ("02_ddp_basics.ipynb", "2."),
                                           ("03_syncbn_sharding.ipynb", "3."), ("04_torchrun.ipynb", "4.")])
def test_no_exercise_is_passed_in_full_by_pasting_a_cell_of_its_lesson(lesson, prefix, tmp_path):
    """Every code cell of the lesson against every exercise of its problem set: the lesson shows an idea on one
    case, the exercise asks for it on another, so no cell of the lesson is a full solution. (Lesson 3 defines
    none of its exercises' functions, so none of its cells can even be graded as one: that is asserted too.)"""
    tried = []
    for index, code in lesson_cells(lesson):
        for exercise_id in exercises.ids():
            if exercise_id.startswith(prefix) and exercises.kind(exercise_id) != "answers" \
                    and _could_pass(exercise_id, code):
                path = tmp_path / f"cell{index}_{exercise_id}.py"
                path.write_text(code)
                report = engine.grade(exercise_id, path, seed=0, hosts=_hosts["warm"])
                tried.append((index, exercise_id, report.score))
                assert report.score < report.max_score, f"cell {index} of {lesson} passes {exercise_id} in full"
    if prefix == "3.":
        assert not tried, tried
    else:
        assert tried, "no cell of the lesson could even be graded: the test would prove nothing"


def test_set_epoch_called_after_the_epochs_batches_is_told_as_that_not_as_the_same_number_twice():
    check = {c.name: c for c in graded("2.2", "wrong_set_epoch_after_the_epoch").checks}[ORDER_2_2]
    assert "each call came after that epoch's loader was read" in check.message, check.message
