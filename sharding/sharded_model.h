// ShardedModel: wraps a Module tree into sharded units and runs ZeRO stages 0–3 on it.
//
// Each unit (a module matched by the wrap policy, plus the root for the parameters no unit
// claims) flattens its parameters into one buffer padded to a multiple of world size ×
// alignment; rank r owns the r-th contiguous slice. Parameters are bound as views into the
// unit's full (gathered) buffer, so the model's code is unchanged; gradients accumulate into
// views of the unit's flat gradient buffer.
//
// What each stage keeps, frees and communicates is decided once by its StagePolicy
// (sharding/stage_policy.h, with the table of the stages); ShardedModel asks it. A shard group
// of one rank (world size 1, hybrid groups of 1) shards nothing, so every stage runs as stage 0
// there: no gathers, no copies, and no collective over a single rank.
//
// Unit boundaries are tape nodes (runtime/autograd.h record_boundary): the backward of a unit's
// "end" node gathers its parameters (stage 3) and installs its gradient buffer; the backward of
// its "begin" node launches the gradient reduction (asynchronous on the communicator's thread)
// and releases what stage 3 frees; at stages 2/3 it first waits for the oldest reductions beyond
// ShardingConfig::max_reductions_in_flight. finish_backward() waits for the rest.
//
// Activation checkpointing (ShardingConfig::checkpoint_every): a checkpointed unit's forward
// runs inside runtime/autograd.h checkpoint_activations(), installed as the module's forward
// wrapper; its recompute runs between its backward boundaries, where its parameters are gathered
// anyway.
//
// Stage 3 prefetch: see ShardingConfig. The live gathered bytes are tracked
// (live_gathered_bytes(), peak_live_gathered_bytes()), and the prefetched ones not yet used
// (peak_prefetched_bytes(), bounded by ShardingConfig::prefetch_bytes).
//
// Tracing (set_trace): spans of every parameter all-gather and gradient reduction per unit
// (issue → completion, sharding/collective_spans.h), of each unit's forward and backward
// compute, and of the host's waits for collectives. Disabled (the default) it costs a null check.
//
// Two queues (stage 3; ShardingConfig::separate_gather_queue). A Communicator runs its
// collectives one at a time in issue order, so on one queue a unit's all-gather in backward —
// prefetched or on demand — would wait behind every gradient reduce-scatter launched before it,
// and the backward with it. Stage 3 therefore issues every parameter all-gather (forward and
// backward, prefetched and on demand, the initial and after-step gathers of the units kept
// gathered) on the gather group, a duplicate of the shard group (Communicator::duplicate: the
// same ranks, a queue, thread and — for nccl — comm stream of its own), and the gradient
// reductions on the shard group itself (hybrid: the across-group all-reduce on the replica
// group, a third queue). The model makes the duplicate itself, at construction, over whatever
// communicator it is given, so every caller (zs-train, tests, benches) gets it without wiring,
// identically on every backend (a split with one color). Each queue keeps the ordering contract
// on its own: every rank issues the gathers in one order and the reductions in another; how the
// two interleave may differ between ranks. Bits do not change (a gather copies; the reductions
// and their accumulation keep their order). Traffic is the same collectives, counted in the
// shard group's stats() (the duplicate records there), so every traffic report is unchanged;
// the split itself is one collective of no bytes at construction. Memory: no tracked bytes (the
// same buffers, held by the same Works); the duplicate costs one thread, and for nccl a second
// NCCL communicator whose channel buffers NCCL allocates outside the trackers, like the
// world's. Stages 0–2 gather only in after_step(), when no reduction runs: one queue.
// On nccl the two communicators run kernels on the same GPU at once, which NVIDIA documents as
// unsafe in general ("Using multiple NCCL communicators concurrently": kernels of two
// communicators launched in different orders on different ranks may wait for each other if
// they cannot run side by side), as hybrid's replica group beside the shard group does too. Such
// a wait ends in the collective timeout (CommTimeout), not a hang, and separate_gather_queue =
// false goes back to one queue. Not yet run on a GPU.
// What still makes backward wait for a reduction: max_reductions_in_flight (its host wait, by
// design).
//
// Unit order check. Stage 3 prefetches along the order the first step recorded, so ranks that
// recorded different orders would pair different units' all-gathers: a CommError where sizes
// differ, a hang where a rank waits for a gather its peers never issue, silently wrong
// parameters where sizes match. So, once per schedule, before it is first used to prefetch, the
// ranks of the world compare it: an all-gather of (hash, length) per pass (4 int64 a rank:
// 32·(N−1) bytes sent, once per run; hybrid adds a third pass, the order of the backward's
// reductions: 48·(N−1)), at the first finish_backward() (every pass), or at the root's next
// forward when no backward came first (the forward pass alone, e.g. inference).
// If they differ, a second all-gather of the orders finds the first differing position, and
// every rank throws the same InvalidArgument naming the pass, the position, the ranks and the
// units each ran there. Until its check a schedule is not used to prefetch. Hybrid checks it
// too, prefetch or not (see "Hybrid overlap").
//
// Hybrid overlap. A unit's gradient shard is all-reduced across the groups (replica_group())
// as soon as its in-group reduce-scatter has completed: every backward boundary issues the
// all-reduces whose reduce-scatters completed, and finish_backward() the rest. The replicas each
// run their own backward, so they issue them in one agreed order: the order of the first
// step's reductions, which the unit order check compared across the world (an all-reduce waits
// until the ones before it in that order are issued; a backward that runs in another order only
// issues later). On the step before that
// check they are all issued in finish_backward(), in unit order. The all-reduce reads the
// reduced shard (or its reduce_dtype staging) in place, as it did at the end of backward: the
// same values, the same bits, the same traffic; it only runs earlier, on the replica group's
// own queue, beside the gathers and the in-group reduce-scatters.
//
// Mixed precision: full parameters and their gradients are in param_dtype; gradients are cast to
// reduce_dtype for the collective; the reduced result is accumulated into fp32 gradients (the
// shard, or stage 0's full buffer) across micro-batches. Every stage reduces every micro-batch
// and accumulates the reduced values in the same order, so stages stay bitwise identical with
// gradient accumulation too. In fp32 (both dtypes fp32) a step's first micro-batch reduces
// straight into the fp32 gradient, without staging.
//
// Gradient accumulation without communication (ShardingConfig::grad_sync = GradSync::kPerStep,
// stages 0/1; DDP's no_sync): the caller marks every micro-batch of a step but the last with
// defer_sync(true). A deferred micro-batch's gradient (param_dtype) is added to the unit's fp32
// sum of the step — stage 0 at the unit's "begin" boundary, stage 1 in finish_backward, the
// same element-wise additions — and nothing is reduced. The last micro-batch adds its gradient
// too and reduces the sum (cast to reduce_dtype where that is not fp32) once: stage 0 all-reduces
// it as each unit's backward ends (overlapped, as DDP's last micro-batch), stage 1
// reduce-scatters it in finish_backward, straight into the fp32 shard when reduce_dtype is
// fp32. Stages 0 and 1 thus stay bitwise identical with each other; against kPerMicroBatch the
// sum and the average over ranks are taken in the other order (Σ_m avg_r vs avg_r Σ_m), which
// changes rounding. With one micro-batch per step both modes run the same code. The sum: stage 0
// its fp32 gradient (the buffer it already keeps); stage 1 in fp32 its flat gradient buffer (the
// step's later micro-batches compute into a temporary 4Ψ, as stage 0 in fp32 does either way),
// in mixed precision a 4Ψ buffer of its own (gradients), made at the first deferred micro-batch.
//
// Memory: a rank's model-state bytes by MemoryTracker category between steps (after
// after_step()), with Ψ = Σ over units of padded_numel, N = the shard group's size, p = bytes
// of a param_dtype element (4 fp32, 2 fp16/bf16), AdamW's state (m and v) included. fp32 is
// param_dtype == fp32; "mixed" is fp16/bf16 (reduce_dtype does not change these: what travels
// in it lives only during the step, in comm_buffers).
//
//   stage | parameters          | gradients                    | master_weights | optimizer_state
//   0 fp32| 4Ψ (= the masters)  | 4Ψ                           | 0              | 8Ψ
//   0 mixd| pΨ                  | pΨ + 4Ψ (fp32 accumulator)   | 4Ψ             | 8Ψ
//   1 fp32| 4Ψ (the masters are | 4Ψ + 4Ψ/N (fp32 shard)       | 0              | 8Ψ/N
//         | its slots)          |                              |                |
//   1 mixd| pΨ                  | pΨ + 4Ψ/N                    | 4Ψ/N           | 8Ψ/N
//   (stage 1 with GradSync::kPerStep and accumulation: + 4Ψ in gradients, the fp32 sum, or in
//   fp32 the later micro-batches' temporary flat gradient)
//   2 fp32| 4Ψ (ditto)          | 4Ψ/N                         | 0              | 8Ψ/N
//   2 mixd| pΨ                  | 4Ψ/N                         | 4Ψ/N           | 8Ψ/N
//   3 fp32| 4Ψ/N (= the masters)| 4Ψ/N                         | 0              | 8Ψ/N
//   3 mixd| pΨ/N                | 4Ψ/N                         | 4Ψ/N           | 8Ψ/N
//
// In-place gathers: where a unit's full parameters persist (stages 1/2, and stage 3's units
// kept gathered), the rank's slice in param_dtype is the full buffer's own slot (a view,
// Communicator::rank_slice), so after_step casts the master into it (mixed) or the optimizer
// updates it there (fp32: the master is that slot) and the all-gathers are in place: they move
// only the other ranks' slices, and no separate copy of the rank's slice exists. Stage 3's
// released units cannot hold their shard in a buffer that is freed after use: their shard is a
// buffer of its own (in fp32 the master), and their all-gathers copy it into its slot.
//
// Totals. fp32: 16Ψ, 8Ψ + 12Ψ/N, 4Ψ + 12Ψ/N, 16Ψ/N. Mixed: (2p + 16)Ψ, 2pΨ + 16Ψ/N,
// pΨ + 16Ψ/N, (16 + p)Ψ/N. Against the ZeRO paper's 2Ψ + 2Ψ + 12Ψ (p = 2: 16Ψ,
// 4Ψ + 12Ψ/N, 2Ψ + 14Ψ/N, 16Ψ/N): gradients accumulate in fp32 shards (4Ψ/N, not 2Ψ/N), stage
// 0 keeps its compute gradients beside the fp32 ones, and stage 1 keeps the full compute
// gradients (it reduce-scatters at the end of backward). During a step, stages 2/3 add one
// unit's full gradient (pΨ_u) per unit in backward,
// each alive until its reduction has read it (at most max_reductions_in_flight of those
// besides the units still in backward), stage 3 its gathered units (pΨ_u each, at most
// max_live_gathered_bytes plus one unit), and
// comm_buffers hold reduce_dtype copies where it differs from param_dtype. Stage 3's units
// kept gathered hold pΨ_u in parameters (their slot is the shard) instead of pΨ_u/N.
// tests/sharding/mixed_precision_test.cc checks the table exactly.
//
// Devices: with a CudaAllocator (cuda:N) the communicator must move tensors on the same GPU
// (nccl) and have the allocator's stream attached as its compute stream
// (Communicator::set_compute_stream) before the ShardedModel is made; both are checked. Every
// buffer is then on the GPU and every op, cast and accumulation runs on that stream. Ordering:
// a collective waits on the device for the kernels enqueued before it was issued (the compute
// stream attachment); the kernels that consume a collective's result wait for it on the device
// (Work::wait_on(compute stream)): a unit's all-gather (on demand or prefetched) before its
// forward or backward, the gradient reductions (and hybrid's cross-group all-reduce) before
// finish_backward's accumulation. So forward and backward never block the host, except the
// rate limit of max_reductions_in_flight (a host wait for an old reduction, see
// wait_for_reductions). The host waits: after_step() for the refreshed parameters' all-gathers
// (once per step), construction, load_full_parameters and visit_full_parameters (they stage
// values through host memory: the init rule and the fills write host buffers, uploaded with
// Tensor::copy_from; visits read a download). Freed memory: a gathered unit's release and a
// dropped gradient are freed by the CudaAllocator on the compute stream (stream-ordered), and
// either after a wait_on for the collective (release: the free is ordered behind the event
// wait) or when the Work drops its buffers, i.e. after the collective completed on the device
// (stages 2/3's full gradients): no collective can touch memory after it is reused.
// DdpSync::kGatherScatter reduces on rank 0's host and is refused on a device. On the CPU,
// wait_on is wait(): the CPU schedule is unchanged.
//
// What each stage keeps, frees and communicates is one StagePolicy (sharding/stage_policy.h),
// made from (stage, hybrid) at construction and asked here; units are built from the UnitPlan
// (sharding/unit_plan.h) that zs-mem sizes too: one offset and padding computation.
//
// A step, in this order: forward + backward + finish_backward() per micro-batch, then the
// optimizer over local_shards() (after any clipping), then after_step(). The order is enforced
// (sharding/step_order.h): a call out of it — an optimizer step or clipping before
// finish_backward(), a second backward before finish_backward(), a forward, backward or second
// optimizer step before after_step(), finish_backward() or after_step() without a backward — is
// an InvalidArgument naming the missed call. finish_backward() stays an explicit call (it is
// where the host waits for the step's reductions). The local shards carry the check as their
// gradient gate (runtime/shard_view.h), so optimizers and clipping enforce it without knowing
// this class.
// Optimizer offload (ZeRO-Offload). With a host allocator (the rank's host tier), the fp32
// master of each unit is a host buffer (master_weights of the host tier, not of the device, in
// fp32 too: the compute copy the model reads becomes a device buffer of its own where the master
// doubled as it), and the optimizer state follows it there (optim allocates state where the
// master lives). local_shards() then hands out host views: the host master and a host copy of the
// fp32 gradient shard (gradients of the host tier), so clipping, unscaling and the optimizer run
// their CPU loops on host memory whatever the device. The gradient shard itself is still reduced
// and accumulated on the device, as without offload; finish_backward() copies each unit's
// accumulated shard to the host right after that unit's reduction was waited for and
// accumulated (unit by unit, every micro-batch, so the host copy always holds the sum so far).
// after_step() copies the updated masters back: cast to param_dtype on the host (one staging
// buffer of the largest unit, parameters of the host tier; none in fp32) and copied into the
// device's compute copy (the shard, its slot of the full buffer, or stage 0's full buffer), from
// which the all-gathers run as before. The copies use the runtime's host copies (memcpy on the
// CPU device, synchronous transfers on a GPU, or its copy stream with set_host_copies), and the
// math is the same functions on the same values: the bits equal the run without offload. Requested
// stage 0 is refused (DeepSpeed's ZeRO-Offload is for the ZeRO stages 1–3); a shard group of one
// rank runs it as stage 0.
//
// Parameter offload (ZeRO-Infinity's offload_param; ShardingConfig::offload_params, stage 3 with
// optimizer offload). The rank's shard of each unit released after use — the compute copy the
// all-gathers read — leaves the device: with kHost it is a host-tier buffer (parameters of the
// host tier; in fp32 the host master itself, unless the masters are paged, so it costs no host
// memory at all), with kNvme a
// view of the parameter pager (runtime/tensor_pager.h; the host holds only the pager's
// buffers). Its gather copies the shard into its own slot of the unit's full buffer (the
// buffer being gathered into: no device memory beyond it) and all-gathers in place. The copy
// is the runtime's host copy (memcpy on the CPU device, a synchronous transfer on a GPU, or its
// copy stream with set_host_copies), made when the gather starts — prefetched or on demand — and
// with kNvme the pager's read of the unit after the one being prefetched is started at the same
// time, along the recorded order, so the disk works while the current unit computes. after_step()
// casts the updated masters into the shards (kNvme: into a pager buffer, written out when the pager
// needs it; the last units are written first, so the first units of the next forward are the ones
// still in the buffers — except with paged masters, where the optimizer's step stores each shard as
// it updates the unit, in its sweep's order: optim/optimizer.h). The same casts of the same
// masters: the bits equal the run without parameter offload. Units kept gathered are not offloaded
// (their full parameters stay on the device anyway). On one rank (one device) stage 3 with
// parameter offload keeps stage 3's row (StagePolicy::make): the "shard" is the whole unit and its
// collectives are over one rank, so that the parameters can leave the device; hybrid groups of one
// rank are refused (they would run stage 0).
//
// Paged masters (optimizer offload to NVMe: ZeRO-Infinity keeps the fp32 masters on NVMe with
// the optimizer state). With a master pager (runtime/tensor_pager.h) the masters are not in the
// host tier: each unit's is one page of the pager, and local_shards()' masters are handles
// without memory that name their page (runtime/shard_view.h's MasterPages). The optimizer reads
// each master in beside its state, updates it and hands it to the view's `updated`, which
// refreshes the unit's compute copy from it (the cast, the upload or the parameter shard's
// store) before the page is written out, so after_step() does not read the masters again.
// Everything else that reads or writes masters (construction's init, load_full_parameters,
// visit_full_parameters, refresh_from_masters after a restore) goes through the pager, a unit at
// a time. Where the device's memory is host memory (the CPU device) the optimizer then reads
// the gradient shard where it was reduced instead of a host copy, so a rank's host holds no
// per-element model state at all; on a GPU the host copy stays. The same update of the same
// values: the bits equal the run with the masters in the host tier.
//
// Not thread-safe: one ShardedModel per rank, used by its thread.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "models/module.h"
#include "runtime/allocator.h"
#include "runtime/host_copies.h"
#include "runtime/shard_view.h"
#include "runtime/tensor_pager.h"
#include "runtime/trace.h"
#include "sharding/collective_spans.h"
#include "sharding/collectives.h"
#include "sharding/stage_policy.h"
#include "sharding/unit_schedule.h"

namespace zs::sharding {

// How stage 0 (DDP) synchronizes gradients. kBucketed is the one to use; the other two are
// deliberately naive, for comparison and teaching, and give the same parameters bit for bit on
// the local backend (every backend reduces element-wise in rank order with fp32 accumulation,
// comm/reduce.h, so how the elements are grouped into calls changes no bits). Per step and rank,
// with B_u = padded_numel × size(reduce_dtype) the bytes of unit u, b_p = numel × size of
// parameter p, N ranks (each term rounded down per call, as CommStats counts):
//   kBucketed      one all_reduce per unit, launched as soon as the unit's backward is done
//                  (overlaps the rest of backward): sent = received = Σ_u 2(N−1)/N · B_u.
//   kPerTensor     one all_reduce per parameter gradient (no padding travels), also launched
//                  at the end of the unit's backward: sent = received = Σ_p 2(N−1)/N · b_p;
//                  many small calls, each paying the per-call latency.
//   kGatherScatter per unit: gather every rank's gradient to rank 0 (blocking the backward),
//                  rank 0 reduces in rank order, then scatters a copy of the result to every
//                  rank (parameter-server style; rank 0's links carry everything): rank 0
//                  sends and receives Σ_u (N−1) · B_u, every other rank sends and receives
//                  Σ_u B_u. Rank 0 holds an N × B_u buffer of the unit (comm_buffers).
enum class DdpSync { kBucketed, kPerTensor, kGatherScatter };
const char* ddp_sync_name(DdpSync sync);  // "bucketed", "per_tensor", "gather_scatter"

struct ShardingConfig {
  int stage = 3;  // 0 (DDP), 1, 2, 3
  // Stage 0's gradient synchronization (see DdpSync); other stages reject anything but
  // kBucketed.
  DdpSync ddp_sync = DdpSync::kBucketed;
  // When stages 0/1 reduce a step of several micro-batches (GradSync, sharding/stage_policy.h;
  // see "Gradient accumulation without communication" above); stages 2/3 reject kPerStep.
  GradSync grad_sync = GradSync::kPerMicroBatch;
  // Hybrid sharding: > 0 shards (stage 3) inside groups of this many consecutive ranks (a node)
  // and replicates across the groups, whose gradient shards are all-reduced after the
  // in-group reduce-scatter. Needs stage 3 and a world size divisible by the group size.
  int hybrid_group = 0;
  std::vector<std::string> wrap_types{"Block"};  // module type names that become units
  // Also a unit: any module holding at least this many parameters no inner unit claimed
  // (FSDP's size-based policy); 0 = off.
  int64_t wrap_min_parameters = 0;
  int64_t alignment = 16;  // elements; shards start aligned
  uint64_t seed = 0;       // parameter init seed
  // Mixed precision: the dtype parameters are gathered and computed in, and the dtype gradients
  // travel in. Masters, optimizer state and gradient accumulators are fp32 either way.
  DType param_dtype = DType::kF32;
  DType reduce_dtype = DType::kF32;
  // Stage 3 scheduling. The first step records the order units run in (forward and backward);
  // later steps start the next unit's all-gather while the current one computes. The ranks
  // check once that they recorded the same order (see "Prefetch order check"). An order change
  // falls back to on-demand gathers with one warning.
  bool prefetch = true;
  // Stage 3: parameter all-gathers on a queue of their own (a duplicate of the shard group), so
  // they never wait behind gradient reductions (see "Two queues"). false: one queue for both,
  // as a single communicator runs them. The same bits and traffic either way.
  bool separate_gather_queue = true;
  // Upper bound on gathered (full) parameter bytes alive at once; a prefetch that would cross
  // it waits until the unit is needed. 0 = no limit.
  size_t max_live_gathered_bytes = 0;
  // Stage 3 prefetch depth in bytes (DeepSpeed's stage3_prefetch_bucket_size, in elements ×
  // param_dtype size). 0: one unit ahead (the next unit of the recorded order, as long as
  // max_live_gathered_bytes allows). N > 0: at each unit's start the all-gathers of the units
  // that follow in the recorded order are issued, in order, while the full bytes of the units
  // gathered ahead and not yet used (prefetched, in flight or arrived) stay <= N; it stops at
  // the first unit that would cross N. The bound is strict, with no "at least one unit" rule:
  // a unit larger than N is never prefetched (it is gathered on demand, when it runs), so the
  // prefetched bytes never exceed N. Units already gathered (kept gathered, enclosing units
  // still in use) are passed over at no cost. Every rank decides from the same sizes and the
  // same checked order, so the gathers keep one order on every rank. Changes no bits.
  size_t prefetch_bytes = 0;
  // Units whose full parameters are smaller than this stay gathered (never released).
  size_t keep_gathered_below_bytes = 0;
  // Stages 2/3: the most gradient reductions left running on the communicator's thread while
  // backward goes on; 0 = no limit. A unit's full gradient (pΨ_u; with a reduce_dtype cast,
  // its reduce_dtype copy) lives until its reduce-scatter has read it, so without a limit a
  // slow communicator can leave every unit's full gradient of the step alive at once. With a
  // limit L, a unit's "begin" boundary in backward first waits for the oldest reductions (in
  // launch order) until fewer than L run, which frees their buffers, then launches its own: at
  // most L reductions' buffers plus the gradients being computed (the unit in backward and the
  // units enclosing it, e.g. the root) are alive, so the gradient peak is bounded by (L + 1)
  // full unit gradients (+ enclosing units) plus the fp32 shards.
  // What it trades: overlap. The backward stalls whenever the communicator is L reductions
  // behind, instead of computing on while the reductions queue up; L = 1 serializes each unit's
  // reduction with the next unit's backward. It is the gradient-side twin of FSDP's rate
  // limiter (limit_all_gathers: the CPU waits once 2 freed all-gathers are queued,
  // "empirically chosen") and of DeepSpeed's reduce_bucket_size (a fixed-size bucket is
  // reduced before the next fills); the default 2 is FSDP's number. Changes no result bits: the
  // reductions and the accumulation in finish_backward happen in the same order either way.
  // Stages 0/1 ignore it (their full gradients are persistent). At stage 3 with
  // separate_gather_queue off, the backward's all-gathers queue behind the older reductions,
  // which bounds them too; with it on (the default) only this limit does.
  int max_reductions_in_flight = 2;
  // Activation checkpointing: 0 = off; k >= 1 checkpoints every k-th checkpointable unit (units
  // 0, k, 2k, … of those that are not the root and enclose no other unit, in forward order;
  // 1 = all of them, e.g. every Block of a GPT). A checkpointed unit's forward records nothing
  // inside the unit and keeps only its input; its backward recomputes the forward with grad on,
  // between the unit's "end" boundary (which gathered its parameters and installed its gradient
  // buffer) and its "begin" boundary, then runs the recomputed graph's backward into the same
  // gradients (runtime/autograd.h checkpoint_activations()). So stage 3 recomputes with the
  // parameters gathered for the backward: no extra all-gather, traffic unchanged (3Ψ), and results
  // are the same bits as without, at any stage and precision, as long as the unit's forward
  // computes the same values twice (models/module.h: dropout keyed by state, not by a call
  // counter). Costs one more forward of the checkpointed units per step; saves their activations
  // but one unit's at a time (plus the checkpoints' inputs). The root and units enclosing others
  // are never checkpointed: their forward runs other units' boundaries, which a recompute would
  // repeat.
  int checkpoint_every = 0;
  // Stage 3: where the parameter shards of the units released after use live (ParamOffload;
  // kHost and kNvme need optimizer offload, kNvme a parameter pager).
  ParamOffload offload_params = ParamOffload::kNone;
};

class StepOrder;

class ShardedModel {
 public:
  // `optimizer_host`: optimizer offload (ZeRO-Offload; see "Optimizer offload" above) — the
  // allocator of the rank's host tier (offload/host_pool.h), host-visible, which must outlive
  // this object; null keeps the masters with the parameters. Offload needs a requested stage of
  // 1–3 (InvalidArgument otherwise).
  // `param_pager`: ShardingConfig::offload_params == kNvme — where the shards live (the rank's
  // NVMe tier, offload/nvme_pager.h); it must outlive this object; null otherwise.
  // `master_pager`: paged masters (optimizer offload to NVMe, with `optimizer_host`) — where the
  // masters live (the rank's NVMe tier); it must outlive this object and the optimizer; null
  // keeps them in the host tier.
  // `overrides` (tests): strategies in place of those the model chooses (collectives.h).
  ShardedModel(models::Module& root, comm::Communicator& comm, Allocator& allocator,
               const ShardingConfig& config, Allocator* optimizer_host = nullptr,
               TensorPager* param_pager = nullptr, TensorPager* master_pager = nullptr,
               const StrategyOverrides& overrides = {});
  ~ShardedModel();
  ShardedModel(const ShardedModel&) = delete;
  ShardedModel& operator=(const ShardedModel&) = delete;

  // Waits for this micro-batch's gradient reductions (stage 1: runs them) and accumulates them,
  // so local_shards()' grads hold the sum over this step's micro-batches of the rank-averaged
  // gradients. Call after each backward. After a deferred micro-batch (defer_sync) it only adds
  // the gradients to the step's local sum where the model reduces once per step, and the
  // gradients may not be read until the last micro-batch's finish_backward().
  void finish_backward();
  // Whether the micro-batches that follow only accumulate (true) or are the step's last
  // (false, the default). Call before a micro-batch's forward: true for every micro-batch of a
  // step but the last (DDP's no_sync). With GradSync::kPerStep a deferred micro-batch is summed
  // locally and not reduced; with kPerMicroBatch it is reduced as always. Either way its
  // gradients are not readable (step order) until a micro-batch that is not deferred finished.
  // Not during a backward (before its finish_backward()): InvalidArgument.
  void defer_sync(bool defer);
  // The rank's shards for the optimizer, one per unit in units() order, named by the unit (the
  // names key optimizer state in checkpoints): the fp32 master (stage 0: the whole padded flat
  // buffer, else the rank's slice), its reduced gradient (averaged over ranks, summed over the
  // step's micro-batches) and a segment for each parameter's elements inside the slice, with its
  // decay flag (padding is in none). The views share the buffers and the step-order gate; build
  // the optimizer once over them.
  const std::vector<ShardView>& local_shards() const { return shards_; }
  // After the optimizer updated the masters: make the parameters the model computes with
  // consistent again (cast into the compute dtype; stages 1/2, and stage 3's units kept
  // gathered: all-gather the updated slices). The next finish_backward() starts a new
  // accumulation.
  void after_step();
  // After a step the optimizer skipped (an fp16 overflow): the masters did not change, so the
  // parameters are consistent as they are and nothing is cast, read (paged masters) or
  // gathered; only the next accumulation starts, as after_step() starts it.
  void after_skipped_step();

  struct UnitInfo {
    std::string name;
    int64_t numel;         // parameter elements
    int64_t padded_numel;  // multiple of world size × alignment
    int64_t shard_numel;
    size_t num_parameters;
    // Its full parameters are never released: every unit where they persist (stages 0–2), and
    // stage 3's units under keep_gathered_below_bytes (StagePolicy::stays_gathered).
    bool stays_gathered;
    // The unit's parameters in flat-buffer order: name, shape and element offset in the buffer
    // (what a checkpoint records to map shard files back to tensors).
    struct Parameter {
      std::string name;
      Shape shape;
      int64_t offset;
    };
    std::vector<Parameter> parameters;
    // Its forward is recomputed in backward (ShardingConfig::checkpoint_every).
    bool checkpointed = false;
  };
  std::vector<UnitInfo> units() const;
  // The masters and the optimizer-side gradients live in the host tier (optimizer offload).
  bool offloads_optimizer() const { return host_ != nullptr; }
  ParamOffload offloads_params() const { return config_.offload_params; }
  // The elements [begin, end) of unit `unit`'s flat buffer that world rank `world_rank` keeps as
  // its master (local_shards()[unit].master on that rank): stage 0 all of them, else the slice
  // of its rank in the shard group.
  std::pair<int64_t, int64_t> master_range(size_t unit, int world_rank) const;
  // After the masters were written through local_shards() (a checkpoint restore): makes the
  // parameters the model computes with consistent with them again, as after_step() does
  // (compute-dtype casts; stages 1/2 and stage 3's kept units re-gather). Collective over the
  // shard group; call between steps.
  void refresh_from_masters();

  // Parameter import and export, for weight files and checkpoints that hold whole parameters.
  // Both are collectives over the world (every rank calls them, between steps: not inside a
  // forward or backward) and visit the parameters in unit order (units() order, each unit's
  // parameters in declaration order; a tied parameter once).
  using ParameterFill =
      std::function<void(const std::string& name, const Shape& shape, float* dst)>;
  using ParameterVisit =
      std::function<void(const std::string& name, const Shape& shape, const float* data)>;
  // Sets the fp32 masters from `fill`, which gets each parameter's name, shape and a temporary
  // fp32 buffer of its full numel (zero-filled) to write. Each rank keeps the elements it owns
  // (stage 0: all), then the compute copies are refreshed and stages 1/2 and stage 3's kept
  // units re-gather, as after_step() does. Optimizer state and gradients are left alone.
  // All or nothing: the owned values are staged (workspace: one fp32 copy of the rank's master
  // elements, plus the largest parameter's full buffer) and committed only when every fill on
  // every rank returned. If a fill throws, the rank skips its remaining fills, the ranks agree
  // (one all_reduce of a flag), no master changes anywhere, and the fill's exception is
  // rethrown on its rank; the other ranks throw InvalidArgument naming the failing rank.
  void load_full_parameters(const ParameterFill& fill);
  // Calls `visit` on every rank with each parameter's full fp32 master values. One unit at a
  // time: the masters are all-gathered over the shard group into one buffer of the unit's padded
  // size (comm_buffers; stage 0 reads its full master without a collective), then visited and
  // freed. If a visit throws, the remaining units are still gathered (so every rank issues the
  // same collectives) but not visited, and the first exception is rethrown at the end.
  void visit_full_parameters(const ParameterVisit& visit);
  const StagePolicy& policy() const { return policy_; }
  // The ranks the parameters are sharded over: the world, or this rank's hybrid group. A
  // global gradient norm sums the local shards over this group (replicas hold the same values).
  comm::Communicator& shard_group() { return *shard_comm_; }
  // Hybrid: the ranks holding replicas of this rank's shards (the gradient shards are
  // all-reduced over it); null otherwise.
  comm::Communicator* replica_group() { return inter_group_.get(); }
  // Where the parameter all-gathers run: the shard group's duplicate at stage 3 with
  // separate_gather_queue, else the shard group itself. Its traffic is in shard_group().stats().
  comm::Communicator& gather_group() { return gather_->group(); }
  size_t live_gathered_bytes() const { return schedule_->live_gathered_bytes(); }
  size_t peak_live_gathered_bytes() const { return schedule_->peak_live_gathered_bytes(); }
  // The most full-parameter bytes ever gathered ahead of use at once (the prefetched units not
  // yet started), measured after each unit's prefetches were issued.
  size_t peak_prefetched_bytes() const { return schedule_->peak_prefetched_bytes(); }
  // Records this rank's spans into `trace` (runtime/trace.h; null: off, the default). It must
  // outlive this object or the next set_trace.
  void set_trace(Trace* trace) { collective_spans_.set_trace(trace); }
  // Optimizer and parameter offload on a GPU: the copies between the device and the host tier go
  // through `copies` (runtime/host_copies.h: a copy stream, ordered by events; null, the
  // default: synchronous copies). finish_backward() downloads every unit's gradient shard there
  // and waits once, at its end; uploads of compute copies and parameter shards run beside the
  // compute unless their host bytes are about to change (a pager's page, the staging buffer of a
  // cast), where the host waits for them. It must outlive this object (whose destructor waits).
  void set_host_copies(HostCopies* copies) { host_copies_ = copies; }
  // Waits for the host copies in flight, for a caller about to rewrite host bytes they read
  // outside the step (a checkpoint's restore writes the host-tier masters through the
  // optimizer). No-op with synchronous copies.
  void finish_host_copies() {
    if (host_copies_ != nullptr) host_copies_->wait();
  }
  // False once an order change disabled prefetching.
  bool prefetching() const { return schedule_->prefetching(); }

 private:
  struct Unit;
  class Units;  // UnitStates over units_, for the schedule's prefetch
  // Stage 3 with prefetch, and hybrid: compares every complete pass of the schedule not checked
  // yet across the world (see "Prefetch order check"); throws InvalidArgument on every rank if
  // they differ.
  void check_recorded_orders();
  // Sets Unit::checkpointed from ShardingConfig::checkpoint_every.
  void mark_checkpointed_units();
  void on_unit_start(Pass pass, Unit& unit);
  void gather(Unit& unit);
  void start_gather(Unit& unit);
  // Stage 3: the all-gathers ahead of `pass`'s position (see ShardingConfig::prefetch_bytes).
  void prefetch_ahead(Pass pass);
  void release(Unit& unit);
  void install_grad_buffer(Unit& unit);
  // Per-step sync: adds this micro-batch's flat gradient to the unit's fp32 sum of the step.
  void add_to_sum(Unit& unit);
  // Where a unit's gradients are complete in backward (stage 0's "begin" boundary) or in
  // finish_backward (stage 1): sum them locally, and reduce them unless deferred.
  void on_gradients_complete(Unit& unit);
  void reduce_grads(Unit& unit);
  // Stages 2/3: waits for the oldest reductions of reducing_ until at most `keep` are left.
  void wait_for_reductions(size_t keep);
  // Hybrid: issues the replica all-reduces of the units whose in-group reduce-scatter has
  // completed, in the checked backward order, stopping at the first that has not — or, with
  // `all` (finish_backward), of every unit still awaiting one (waiting for its reduce-scatter on
  // the compute stream).
  void start_reductions_across_groups(bool all);
  // Stage 0 with DdpSync::kGatherScatter: the gradient average of `send` through rank 0.
  void gather_reduce_scatter(Unit& unit, const Tensor& send,
                             const comm::CollectiveOptions& options);
  // The compute copy from the unit's master (paged: read in for it), or from `master`, the
  // master's resident values.
  void refresh_compute_copy(Unit& unit);
  void refresh_compute_copy(Unit& unit, const Tensor& master);
  // refresh_full_parameters' refresh of one unit (see Unit::compute_copy_fresh).
  void refresh_from_master(Unit& unit, bool after_optimizer);
  // Waits (on the compute stream) for the unit's all-gather in flight, if any.
  void finish_gathering(Unit& unit);
  // The unit's master resident for a scope: itself, or its page of master_pager_ (read in, or
  // with `overwrite` not read: for a caller that writes every element and marks it written).
  PageAccess master_of(Unit& unit, bool overwrite);
  // Stage 0 in fp32: the step's first micro-batch is all-reduced in place in the fp32 gradient.
  bool reduces_in_place() const {
    return !policy_.masters_sharded && config_.param_dtype == DType::kF32 &&
           config_.reduce_dtype == DType::kF32;
  }
  // GradSync::kPerStep: this micro-batch is only summed locally.
  bool deferring() const { return once_per_step_ && defer_; }
  // GradSync::kPerStep: this (last) micro-batch reduces the local sum of the step's
  // micro-batches (earlier ones were deferred into it), not its own gradient.
  bool reduces_sum() const { return once_per_step_ && accumulating_; }
  // Compute copies from the masters, and the all-gathers of the units kept gathered.
  // `after_optimizer` (after_step): the units the optimizer already refreshed are not read again.
  void refresh_full_parameters(bool after_optimizer);
  // The stream later kernels run on: the communicator's compute stream (the host on the CPU).
  const comm::StreamRef& compute_stream() const { return shard_comm_->compute_stream(); }
  // Optimizer offload: the host master's values (cast to param_dtype through host_staging_)
  // copied into the device buffer the model computes from.
  void upload_compute_copy(Unit& unit, const Tensor& master);
  // dst ← the host bytes at `host`: on host_copies_ (then waiting for it where `then_wait`, before
  // the host bytes change), or synchronously without.
  void upload(const Tensor& dst, const void* host, bool then_wait);
  // Parameter offload: the unit's shard as the next compute copy, cast from the master into the
  // host tier's shard (kHost) or a pager buffer written out (kNvme).
  void store_offloaded_shard(Unit& unit, const Tensor& master);
  // Parameter offload: the unit's shard into its slot of the (materialized) full buffer; returns
  // the slot.
  Tensor load_offloaded_shard(Unit& unit);
  // The all-gather of the unit's shard into its (materialized) full buffer, traced: from the
  // compute shard, or for an offloaded unit in place from its slot after load_offloaded_shard.
  comm::WorkPtr issue_gather(Unit& unit);

  models::Module& root_;
  comm::Communicator& comm_;
  std::unique_ptr<comm::Communicator> intra_group_;  // hybrid: ranks sharing the shards
  std::unique_ptr<comm::Communicator> inter_group_;  // hybrid: the replicas of this shard
  comm::Communicator* shard_comm_;
  std::unique_ptr<ParamGather> gather_;  // the units' all-gathers (collectives.h)
  Allocator& allocator_;
  Allocator* host_;      // optimizer offload: the host tier's allocator; null otherwise
  Tensor host_staging_;  // offload with param_dtype != fp32: the largest master, cast, on the host
  TensorPager* param_pager_;           // ParamOffload::kNvme: the shards' pages; null otherwise
  TensorPager* master_pager_;          // paged masters (optimizer offload to NVMe); null otherwise
  HostCopies* host_copies_ = nullptr;  // set_host_copies; null: synchronous host copies
  ShardingConfig config_;
  StagePolicy policy_;
  std::vector<std::unique_ptr<Unit>> units_;
  // Stages 2/3: the units whose reductions this backward launched and nobody waited for yet,
  // in launch order (the rate limit of max_reductions_in_flight waits for the front).
  std::deque<Unit*> reducing_;
  // Hybrid: how far this micro-batch issued the all-reduces across the groups along the
  // schedule's recorded reductions.
  size_t replica_position_ = 0;
  std::vector<ShardView> shards_;
  std::shared_ptr<StepOrder> step_order_;  // also the gate of shards_
  // The units' recorded order, prefetch and the gathered-byte counters (unit_schedule.h).
  std::unique_ptr<UnitSchedule> schedule_;
  // grads (with GradSync::kPerStep: the units' sums) already hold a micro-batch of this step
  bool accumulating_ = false;
  bool once_per_step_ = false;  // GradSync::kPerStep
  bool defer_ = false;          // defer_sync(true): the micro-batches now are not the step's last
  bool on_device_ = false;      // the allocator is a device's (CUDA): host values are staged
  CollectiveSpans collective_spans_;  // tracing (set_trace); disabled by default
};

}  // namespace zs::sharding
