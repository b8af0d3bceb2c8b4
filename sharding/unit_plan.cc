// plan_units: the wrap policy applied to a module tree; the flat-buffer padding.
#include "sharding/unit_plan.h"

#include <algorithm>
#include <map>
#include <set>

#include "runtime/error.h"

namespace zs::sharding {

std::vector<UnitPlan> plan_units(models::Module& root, const std::vector<std::string>& wrap_types,
                                 int64_t wrap_min_parameters) {
  std::vector<models::Module*> modules = root.modules();  // pre-order, root first
  std::set<models::Parameter*> claimed;
  std::map<models::Module*, UnitPlan> found;
  auto claim = [&](models::Module* module) {
    UnitPlan unit;
    unit.module = module;
    unit.name = module == &root ? "<root>" : module->name();
    for (models::Parameter* p : module->parameters()) {
      if (claimed.insert(p).second) unit.parameters.push_back(p);
    }
    found.emplace(module, std::move(unit));
  };
  // Reverse pre-order visits descendants before their ancestors: inner units claim first.
  for (auto it = modules.rbegin(); it != modules.rend(); ++it) {
    models::Module* m = *it;
    if (m == &root) continue;
    const bool by_type =
        std::find(wrap_types.begin(), wrap_types.end(), m->type_name()) != wrap_types.end();
    int64_t unclaimed = 0;
    for (models::Parameter* p : m->parameters()) unclaimed += claimed.count(p) ? 0 : p->numel();
    const bool by_size = wrap_min_parameters > 0 && unclaimed >= wrap_min_parameters;
    if ((by_type || by_size) && unclaimed > 0) claim(m);
  }
  claim(&root);

  // Forward order (pre-order of the modules) for deterministic naming and collective order.
  std::vector<UnitPlan> plan;
  std::map<models::Module*, int> index;
  for (models::Module* m : modules) {
    auto it = found.find(m);
    if (it == found.end()) continue;
    UnitPlan unit = std::move(it->second);
    for (models::Module* up = m->parent(); up != nullptr && unit.parent < 0; up = up->parent()) {
      auto enclosing = index.find(up);
      if (enclosing != index.end()) unit.parent = enclosing->second;
    }
    for (models::Parameter* p : unit.parameters) {
      unit.offsets.push_back(unit.numel);
      unit.numel += p->numel();
    }
    index[m] = static_cast<int>(plan.size());
    plan.push_back(std::move(unit));
  }
  return plan;
}

int64_t padded_numel(int64_t numel, int64_t world, int64_t alignment) {
  ZS_CHECK(numel >= 0 && world >= 1 && alignment >= 1,
           "sharding: padded_numel needs numel >= 0, world >= 1 and alignment >= 1, got ", numel,
           ", ", world, ", ", alignment);
  const int64_t multiple = world * alignment;
  return (std::max<int64_t>(numel, 1) + multiple - 1) / multiple * multiple;
}

int64_t shard_numel(int64_t numel, int64_t world, int64_t alignment) {
  return padded_numel(numel, world, alignment) / world;
}

}  // namespace zs::sharding
