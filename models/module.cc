// Module tree, parameter specs, init rules and unsharded materialization.
#include "models/module.h"

#include <set>
#include <vector>

#include "runtime/rng.h"

namespace zs::models {

void InitRule::fill(float* out, uint64_t begin, size_t count, uint64_t seed,
                    const std::string& name) const {
  switch (kind) {
    case Kind::kConstant:
      for (size_t j = 0; j < count; ++j) out[j] = a;
      return;
    case Kind::kNormal:
      fill_normal(out, begin, count, rng_key(seed, name), a, b);
      return;
    case Kind::kUniform:
      fill_uniform(out, begin, count, rng_key(seed, name), a, b);
      return;
  }
}

std::string InitRule::describe() const {
  switch (kind) {
    case Kind::kConstant:
      return detail::concat("constant(", a, ")");
    case Kind::kNormal:
      return detail::concat("normal(", a, ", ", b, ")");
    case Kind::kUniform:
      return detail::concat("uniform(", a, ", ", b, ")");
  }
  return "?";
}

Parameter::Parameter(Module* owner, std::string local_name, Shape shape, DType dtype, InitRule init,
                     bool decay)
    : owner_(owner),
      local_name_(std::move(local_name)),
      shape_(std::move(shape)),
      numel_(shape_numel(shape_)),
      dtype_(dtype),
      init_(init),
      decay_(decay) {
  ZS_CHECK(is_floating(dtype_), "parameter '", local_name_, "' must have a floating dtype, got ",
           dtype_name(dtype_));
}

std::string Parameter::name() const {
  const std::string prefix = owner_->name();
  return prefix.empty() ? local_name_ : prefix + "." + local_name_;
}

const Tensor& Parameter::tensor() const {
  ZS_CHECK(tensor_.defined(), "parameter '", name(), "' ", shape_str(shape_),
           " is not materialized: call materialize() on the model, or wrap it in a sharded "
           "model, before running forward");
  return tensor_;
}

void Parameter::bind(Tensor tensor) {
  // The dtype may differ from the declared one: under mixed precision the bound tensor is the
  // gathered compute copy (fp16/bf16) of fp32 master weights.
  ZS_CHECK(tensor.shape() == shape_ && is_floating(tensor.dtype()), "parameter '", name(), "' is ",
           shape_str(shape_), " but was bound to ", tensor.describe());
  tensor_ = std::move(tensor);
}

Module::Module(std::string type_name) : type_name_(std::move(type_name)) {}
Module::~Module() = default;

std::string Module::name() const {
  if (!parent_) return "";
  const std::string prefix = parent_->name();
  return prefix.empty() ? local_name_ : prefix + "." + local_name_;
}

Tensor Module::operator()(const Tensor& input) {
  for (auto& hook : pre_hooks_) hook(*this, input);
  Tensor output = forward_wrapper_
                      ? forward_wrapper_(input, [this](const Tensor& x) { return forward(x); })
                      : forward(input);
  for (auto& hook : post_hooks_) output = hook(*this, input, output);
  return output;
}

void Module::clear_hooks() {
  pre_hooks_.clear();
  post_hooks_.clear();
  forward_wrapper_ = nullptr;
}

std::vector<Module*> Module::modules() {
  std::vector<Module*> out{this};
  for (Module* child : children_) {
    std::vector<Module*> sub = child->modules();
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

std::vector<Parameter*> Module::parameters() {
  std::vector<Parameter*> out;
  for (Module* m : modules()) {
    out.insert(out.end(), m->own_parameters_.begin(), m->own_parameters_.end());
  }
  return out;
}

int64_t Module::num_parameters() {
  int64_t n = 0;
  for (Parameter* p : parameters()) n += p->numel();
  return n;
}

Parameter& Module::declare(const std::string& local_name, Shape shape, InitRule init, bool decay,
                           DType dtype) {
  ZS_CHECK(!local_name.empty() && local_name.find('.') == std::string::npos, "module '", name(),
           "' (", type_name_, "): parameter name '", local_name,
           "' must be non-empty and contain no '.'");
  for (Parameter* p : own_parameters_) {
    ZS_CHECK(p->local_name() != local_name, "module '", name(), "' (", type_name_,
             ") declares parameter '", local_name, "' twice");
  }
  for (Module* c : children_) {
    ZS_CHECK(c->local_name_ != local_name, "module '", name(), "': parameter '", local_name,
             "' has the name of a child module");
  }
  owned_parameters_.push_back(
      std::make_unique<Parameter>(this, local_name, std::move(shape), dtype, init, decay));
  own_parameters_.push_back(owned_parameters_.back().get());
  return *owned_parameters_.back();
}

void Module::adopt(const std::string& local_name, std::unique_ptr<Module> child) {
  ZS_CHECK(child != nullptr, "module '", name(), "': null child '", local_name, "'");
  ZS_CHECK(child->parent_ == nullptr, "module '", local_name, "' already has a parent");
  ZS_CHECK(!local_name.empty() && local_name.find('.') == std::string::npos, "module '", name(),
           "': child name '", local_name, "' must be non-empty and contain no '.'");
  for (Module* c : children_) {
    ZS_CHECK(c->local_name_ != local_name, "module '", name(), "' has two children named '",
             local_name, "'");
  }
  for (Parameter* p : own_parameters_) {
    ZS_CHECK(p->local_name() != local_name, "module '", name(), "': child '", local_name,
             "' has the name of a parameter");
  }
  child->parent_ = this;
  child->local_name_ = local_name;
  children_.push_back(child.get());
  owned_children_.push_back(std::move(child));
}

void materialize(Module& root, Allocator& allocator, uint64_t seed) {
  std::set<uint32_t> streams;
  for (Parameter* p : root.parameters()) {
    const std::string name = p->name();
    // Two names whose 32-bit stream ids collide would get the same random values.
    ZS_CHECK(streams.insert(stream_id(name)).second, "parameter '", name,
             "' has the same RNG stream id as an earlier parameter; rename one of them");
    Tensor t = Tensor::empty(p->shape(), p->dtype(), allocator, MemoryCategory::kParameters, name);
    std::vector<float> values(static_cast<size_t>(p->numel()));
    p->init().fill(values.data(), 0, values.size(), seed, name);
    t.copy_from(values);
    t.set_requires_grad(true);
    p->bind(std::move(t));
  }
}

}  // namespace zs::models
