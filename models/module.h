// Module: how a user writes a model for zeroshard — named parameters declared with a shape, a
// dtype and an init rule, child modules, and a forward. Calling a module through operator()
// runs its hooks around forward(); the sharding layer wraps a module as a unit by installing
// hooks, so wrapping needs no change to the module's code.
//
// Parameters are declared, not allocated: a Parameter holds its spec, and its tensor is bound
// later — to its own storage by materialize() (unsharded), or to a view of its unit's gathered
// flat buffer by the sharding layer. Values come from the counter-based RNG keyed by
// (seed, full parameter name, element index), so a rank can initialize exactly its shard and
// sharded init equals unsharded init bit for bit (InitRule::fill).
//
// Names: a module's name is its path from the root ("blocks.3.attn"); a parameter's is the
// module's name plus its own ("blocks.3.attn.qkv.weight"). Names are final once the tree is
// built; they key the RNG, checkpoints and error messages.
//
// Ownership: a module owns its children (unique_ptr) and its parameters. Not thread-safe: one
// model instance per rank (ranks that are threads each build their own).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace zs::models {

class Module;

// How a parameter's initial values are made: a pure function of (seed, name, element index).
struct InitRule {
  enum class Kind { kConstant, kNormal, kUniform };
  Kind kind = Kind::kConstant;
  float a = 0;  // constant value, normal mean, or uniform low
  float b = 0;  // normal stddev, or uniform high

  static InitRule zeros() { return {Kind::kConstant, 0, 0}; }
  static InitRule ones() { return {Kind::kConstant, 1, 0}; }
  static InitRule constant(float value) { return {Kind::kConstant, value, 0}; }
  static InitRule normal(float stddev, float mean = 0) { return {Kind::kNormal, mean, stddev}; }
  static InitRule uniform(float low, float high) { return {Kind::kUniform, low, high}; }

  // out[j] = the initial value of element (begin + j) of parameter `name` under `seed`.
  void fill(float* out, uint64_t begin, size_t count, uint64_t seed, const std::string& name) const;
  std::string describe() const;  // "normal(0, 0.02)"
};

class Parameter {
 public:
  Parameter(Module* owner, std::string local_name, Shape shape, DType dtype, InitRule init,
            bool decay);
  Parameter(const Parameter&) = delete;
  Parameter& operator=(const Parameter&) = delete;

  std::string name() const;  // full dotted name
  const std::string& local_name() const { return local_name_; }
  const Shape& shape() const { return shape_; }
  int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }  // of the master copy (fp32 by default)
  const InitRule& init() const { return init_; }
  bool decay() const { return decay_; }  // weight decay applies (not to biases and norms)
  Module& owner() const { return *owner_; }

  // The bound tensor; throws InvalidArgument naming the parameter if none is bound yet.
  const Tensor& tensor() const;
  bool is_bound() const { return tensor_.defined(); }
  // Binds the tensor that holds the values: the spec's shape, any floating dtype (the compute
  // dtype under mixed precision).
  void bind(Tensor tensor);

 private:
  Module* owner_;
  std::string local_name_;
  Shape shape_;
  int64_t numel_;
  DType dtype_;
  InitRule init_;
  bool decay_;
  Tensor tensor_;
};

class Module {
 public:
  // `type_name` says what kind of module this is ("Block", "Linear"): wrap policies match it.
  explicit Module(std::string type_name);
  virtual ~Module();
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& type_name() const { return type_name_; }
  std::string name() const;  // path from the root; "" for the root
  Module* parent() const { return parent_; }

  // Runs the pre-hooks, forward, then the post-hooks (each may replace the output).
  Tensor operator()(const Tensor& input);

  using PreHook = std::function<void(Module& module, const Tensor& input)>;
  using PostHook = std::function<Tensor(Module& module, const Tensor& input, const Tensor& output)>;
  void add_pre_hook(PreHook hook) { pre_hooks_.push_back(std::move(hook)); }
  void add_post_hook(PostHook hook) { post_hooks_.push_back(std::move(hook)); }
  // How operator() runs forward() between the hooks: `wrapper` gets the input and a function
  // that runs this module's forward() (children's hooks included, its own not); it may call it
  // more than once, later (activation checkpointing recomputes a unit in backward: runtime/
  // autograd.h checkpoint_activations()), so the module must outlive what the wrapper recorded.
  // Null: forward() directly. One wrapper per module; clear_hooks() removes it too.
  using Forward = std::function<Tensor(const Tensor& input)>;
  using ForwardWrapper = std::function<Tensor(const Tensor& input, Forward forward)>;
  void set_forward_wrapper(ForwardWrapper wrapper) { forward_wrapper_ = std::move(wrapper); }
  void clear_hooks();

  // Direct children in declaration order.
  const std::vector<Module*>& children() const { return children_; }
  // This module and all descendants, pre-order (declaration order).
  std::vector<Module*> modules();
  // This module's own parameters, in declaration order.
  const std::vector<Parameter*>& own_parameters() const { return own_parameters_; }
  // All parameters of the subtree, pre-order, each once.
  std::vector<Parameter*> parameters();
  int64_t num_parameters();

 protected:
  virtual Tensor forward(const Tensor& input) = 0;

  // Declares a parameter of this module (names are unique within the module).
  Parameter& declare(const std::string& local_name, Shape shape, InitRule init, bool decay = true,
                     DType dtype = DType::kF32);
  // Adopts a child module under `local_name`.
  template <typename M>
  M& add(const std::string& local_name, std::unique_ptr<M> child) {
    M& ref = *child;
    adopt(local_name, std::unique_ptr<Module>(std::move(child)));
    return ref;
  }
  template <typename M, typename... Args>
  M& emplace(const std::string& local_name, Args&&... args) {
    return add(local_name, std::make_unique<M>(std::forward<Args>(args)...));
  }

 private:
  void adopt(const std::string& local_name, std::unique_ptr<Module> child);

  std::string type_name_;
  std::string local_name_;
  Module* parent_ = nullptr;
  std::vector<std::unique_ptr<Module>> owned_children_;
  std::vector<Module*> children_;
  std::vector<std::unique_ptr<Parameter>> owned_parameters_;
  std::vector<Parameter*> own_parameters_;
  std::vector<PreHook> pre_hooks_;
  std::vector<PostHook> post_hooks_;
  ForwardWrapper forward_wrapper_;
};

// Binds every parameter of `root` to its own storage on `allocator` (category parameters),
// filled by its init rule under `seed`, with requires_grad set. The unsharded path: DDP replicas,
// single-rank runs, references in tests.
void materialize(Module& root, Allocator& allocator, uint64_t seed);

}  // namespace zs::models
