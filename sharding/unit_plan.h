// Unit assignment as a pure function: which modules of a Module tree become sharded units, which
// parameters each unit holds (in flat-buffer order), and the padding arithmetic of a unit's flat
// buffer. ShardedModel builds its units from plan_units(); zs-mem (train/memory_model.h) sizes
// them without allocating anything.
//
// The rule: modules the wrap policy matches — by type name, or by holding at least
// `wrap_min_parameters` parameters that no inner unit claimed — claim their subtree's unclaimed
// parameters, inner units first; the root takes the rest (it is always a unit, named "<root>",
// possibly with no parameters). The plan lists units in forward order: pre-order of the modules.
//
// Pure functions over a built tree (no allocation, no hooks); the returned plan points into the
// tree, which must outlive it. Thread-safe for distinct trees.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/module.h"

namespace zs::sharding {

struct UnitPlan {
  std::string name;                            // "<root>" or the module's path ("blocks.3")
  models::Module* module = nullptr;            // the module whose hooks bound the unit
  std::vector<models::Parameter*> parameters;  // in flat-buffer order
  std::vector<int64_t> offsets;                // element offset of each parameter in the buffer
  int64_t numel = 0;                           // Σ numel of `parameters` (no padding)
  // Index in the plan of the nearest enclosing unit (the root unit for top-level ones); -1 for
  // the root. Units nest like their modules: an enclosing unit stays gathered while an inner one
  // runs.
  int parent = -1;
};

// The units of `root` in forward order (the root unit first). Throws nothing for an empty policy:
// then the root is the only unit.
std::vector<UnitPlan> plan_units(models::Module& root, const std::vector<std::string>& wrap_types,
                                 int64_t wrap_min_parameters = 0);

// Activation checkpointing's choice (ShardingConfig::checkpoint_every = k): of the units that can
// be checkpointed (below the root, enclosing no other unit), numbered 0, 1, … in forward order,
// units 0, k, 2k, … are; k = 0 checkpoints none. zs-mem's activation estimate asks the same.
inline bool checkpoints_unit(int64_t index, int checkpoint_every) {
  return checkpoint_every > 0 && index % checkpoint_every == 0;
}

// A unit's flat buffer holds max(numel, 1) elements rounded up to a multiple of
// world × alignment (so every rank's slice starts aligned); rank r owns the r-th of `world`
// equal slices. `world` is the number of ranks sharing the shards (the hybrid group size under
// hybrid sharding). Throws InvalidArgument for numel < 0, world < 1 or alignment < 1.
int64_t padded_numel(int64_t numel, int64_t world, int64_t alignment);
int64_t shard_numel(int64_t numel, int64_t world, int64_t alignment);  // padded / world

}  // namespace zs::sharding
