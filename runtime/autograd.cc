// The linear tape: recording, backward traversal, gradient sinks.
#include "runtime/autograd.h"

namespace zs {
namespace {

thread_local bool t_grad_enabled = true;
thread_local Tape t_own_tape;
// Where ops record: the thread's own tape, or one a TapeScope installed (a checkpoint's
// recompute, while the outer tape is being walked).
thread_local Tape* t_tape = &t_own_tape;

}  // namespace

bool grad_enabled() { return t_grad_enabled; }
GradModeScope::GradModeScope(bool enabled) : previous_(t_grad_enabled) { t_grad_enabled = enabled; }
GradModeScope::~GradModeScope() { t_grad_enabled = previous_; }

Tape& current_tape() { return *t_tape; }

TapeScope::TapeScope(Tape& tape) : previous_(t_tape) { t_tape = &tape; }
TapeScope::~TapeScope() { t_tape = previous_; }

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!t_grad_enabled) return false;
  for (const Tensor* t : inputs) {
    if (t && t->defined() && t->requires_grad()) return true;
  }
  return false;
}

void record_op(const char* op, std::initializer_list<const Tensor*> inputs,
               std::initializer_list<const Tensor*> outputs, BackwardFn backward) {
  TapeNode node;
  node.op = op;
  for (const Tensor* t : inputs) {
    const bool wants = t && t->defined() && t->requires_grad();
    node.inputs.push_back(wants ? t->autograd_meta() : nullptr);
  }
  for (const Tensor* t : outputs) {
    ZS_CHECK(t && t->defined(), "op '", op, "' recorded an undefined output");
    AutogradMeta& meta = *t->autograd_meta();
    meta.requires_grad = true;
    meta.is_leaf = false;
    node.outputs.push_back(t->autograd_meta());
  }
  node.backward = std::move(backward);
  t_tape->record(std::move(node));
}

void record_boundary(std::string op, BackwardFn backward) {
  if (!t_grad_enabled) return;
  TapeNode node;
  node.op = std::move(op);
  node.backward = std::move(backward);
  node.always_run = true;
  t_tape->record(std::move(node));
}

void backward(const Tensor& loss, float seed) { t_tape->backward(loss, seed); }

Tensor checkpoint_activations(const std::string& name, const Tensor& input,
                              std::function<Tensor(const Tensor&)> fn) {
  if (!t_grad_enabled) return fn(input);
  Tensor output;
  {
    NoGradScope no_grad;
    output = fn(input);
  }
  ZS_CHECK(output.defined(), "checkpoint '", name, "': the function returned no tensor");
  // An identity has nothing to recompute (and recording it would mark the input as its own
  // output).
  if (output.autograd_meta() == input.autograd_meta()) return output;
  ZS_CHECK(!output.requires_grad(), "checkpoint '", name, "': the function returned ",
           output.describe(),
           ", which already requires grad (a parameter or a value computed outside it); "
           "return a value the function computes from its input");
  const std::string op = "checkpoint " + name;
  // Keeps `input` (its storage) until backward: the one activation a checkpoint saves.
  record_op(op.c_str(), {&input}, {&output}, [input, fn = std::move(fn)](BackwardContext& ctx) {
    const Tensor grad = ctx.grad_output(0);
    Tape tape;
    Tensor recomputed;
    {
      TapeScope record_here(tape);
      GradModeScope grad_on(true);
      recomputed = fn(input);
    }
    if (!recomputed.requires_grad()) return;  // nothing in fn needed a gradient
    tape.backward(recomputed, grad);
  });
  return output;
}

Tensor BackwardContext::grad_output(size_t i) const {
  ZS_CHECK(i < node_.outputs.size(), "op '", node_.op, "' asked for output ", i, " of ",
           node_.outputs.size());
  return node_.outputs[i]->grad;
}

bool BackwardContext::needs_input_grad(size_t i) const {
  return i < node_.inputs.size() && node_.inputs[i] != nullptr;
}

GradSink BackwardContext::grad_input(size_t i) {
  if (!needs_input_grad(i)) return GradSink{};
  AutogradMeta& meta = *node_.inputs[i];
  if (meta.grad.defined()) return GradSink{meta.grad, true};
  const MemoryCategory category =
      meta.is_leaf ? MemoryCategory::kGradients : MemoryCategory::kActivations;
  meta.grad = Tensor::empty(meta.shape, meta.dtype, *meta.allocator, category,
                            meta.name.empty() ? "grad" : "grad of " + meta.name);
  return GradSink{meta.grad, false};
}

void BackwardContext::alias_or_accumulate_input_grad(size_t i, const Tensor& grad) {
  if (!needs_input_grad(i)) return;
  AutogradMeta& meta = *node_.inputs[i];
  if (!meta.grad.defined() && !meta.is_leaf && grad.dtype() == meta.dtype) {
    meta.grad = Tensor::from_storage(grad.storage(), grad.offset_bytes(), meta.shape, grad.dtype(),
                                     meta.name);
    return;
  }
  GradSink sink = grad_input(i);
  if (!sink.accumulate) zero_bytes(sink.buffer);
  accumulate_into(sink.buffer, grad);  // converts when the dtypes differ
}

void Tape::record(TapeNode node) { nodes_.push_back(std::move(node)); }

void Tape::clear() { nodes_.clear(); }

void Tape::backward(const Tensor& loss, float seed) {
  ZS_CHECK(loss.defined() && loss.numel() == 1, "backward needs a scalar loss, got ",
           loss.describe());
  ZS_CHECK(loss.requires_grad(), "backward: the loss ", loss.describe(),
           " does not require grad (was it computed under NoGradScope, or from tensors "
           "without requires_grad?)");
  AutogradMeta& loss_meta = *loss.autograd_meta();
  Tensor seed_grad = Tensor::empty(loss.shape(), loss.dtype(), loss.allocator(),
                                   MemoryCategory::kActivations, "grad of loss");
  seed_grad.fill(seed);
  if (loss_meta.grad.defined()) {
    accumulate_into(loss_meta.grad, seed_grad);
  } else {
    loss_meta.grad = std::move(seed_grad);  // no other handle: freed once the loss's node ran
  }
  run_backward(loss_meta);
}

void Tape::backward(const Tensor& output, const Tensor& grad) {
  ZS_CHECK(output.defined() && grad.defined() && grad.shape() == output.shape(),
           "backward: the gradient ", grad.describe(), " does not match the output ",
           output.describe());
  ZS_CHECK(output.requires_grad(), "backward: the output ", output.describe(),
           " does not require grad");
  AutogradMeta& meta = *output.autograd_meta();
  if (meta.grad.defined()) {
    accumulate_into(meta.grad, grad);
  } else {
    meta.grad = grad;  // the caller's gradient, as a consumer's node would have handed it over
  }
  run_backward(meta);
}

void Tape::run_backward(AutogradMeta& seeded) {
  struct ClearOnExit {
    Tape& tape;
    ~ClearOnExit() { tape.clear(); }
  } clear_on_exit{*this};
  for (auto it = nodes_.rbegin(); it != nodes_.rend(); ++it) {
    TapeNode& node = *it;
    bool has_grad = node.always_run;
    for (const auto& out : node.outputs) has_grad = has_grad || out->grad.defined();
    if (has_grad && node.backward) {
      BackwardContext ctx(node);
      node.backward(ctx);
    }
    // Free what this node kept: its closure's saved activations and its outputs' gradients.
    node.backward = nullptr;
    for (const auto& out : node.outputs) {
      if (!out->is_leaf) out->grad = Tensor();
    }
    node.outputs.clear();
    node.inputs.clear();
  }
  if (!seeded.is_leaf) seeded.grad = Tensor();
}

}  // namespace zs
