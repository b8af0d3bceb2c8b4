// Storage: one allocation of device memory, shared by the tensors that view it.
//
// A Storage can release its memory while views of it still exist (a sharded unit drops its
// gathered parameters after use) and be materialized again later (the next all-gather). Views
// then see the new memory at the same offsets. Touching the data of a released storage is a
// checked ReleasedTensor error; Tensor adds the tensor's own name to it.
//
// Ownership: shared by tensors through std::shared_ptr. Not thread-safe for concurrent
// release/materialize; reads of data() from several threads are fine while neither runs.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "runtime/allocator.h"

namespace zs {

class Storage {
 public:
  // Allocates nbytes on `allocator`, charged to `category`; `name` says whose memory this is
  // (e.g. "unit blocks.3 gathered params") in errors and the memory timeline.
  static std::shared_ptr<Storage> create(Allocator& allocator, size_t nbytes,
                                         MemoryCategory category, std::string name);
  // A storage that starts released: a size and no memory until materialize() — the handle of
  // values that live elsewhere (a paged master, runtime/shard_view.h), whose data() is a
  // ReleasedTensor error naming it.
  static std::shared_ptr<Storage> create_released(Allocator& allocator, size_t nbytes,
                                                  MemoryCategory category, std::string name);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  // The memory; throws ReleasedTensor if released.
  void* data() const;
  void* data_unchecked() const { return data_; }  // null when released
  size_t nbytes() const { return nbytes_; }
  bool is_released() const { return released_; }
  const std::string& name() const { return name_; }
  MemoryCategory category() const { return category_; }
  Allocator& allocator() const { return *allocator_; }
  Device device() const { return allocator_->device(); }
  bool host_visible() const { return allocator_->host_visible(); }

  // Frees the memory (and its tracker charge); views stay valid handles. Idempotent.
  void release();
  // Allocates the memory again after release (contents undefined). No-op if not released.
  void materialize();

 private:
  Storage(Allocator& allocator, size_t nbytes, MemoryCategory category, std::string name,
          bool allocate);

  Allocator* allocator_;
  void* data_ = nullptr;
  size_t nbytes_;
  MemoryCategory category_;
  std::string name_;
  bool released_ = false;
};

}  // namespace zs
