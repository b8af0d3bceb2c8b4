// PageAccess (runtime/tensor_pager.h): one view's tensors held resident for a scope.
#include "runtime/tensor_pager.h"

#include <exception>

#include "runtime/logging.h"

namespace zs {

Tensor page_view(const Tensor& page, const Shape& shape, DType dtype, const std::string& name) {
  return Tensor::from_storage(page.storage(), page.offset_bytes(), shape, dtype, name);
}

PageAccess::PageAccess(PageAccess&& other) noexcept
    : pager_(other.pager_),
      view_(other.view_),
      tensors_(std::move(other.tensors_)),
      written_(other.written_) {
  other.pager_ = nullptr;
}

PageAccess::~PageAccess() {
  if (pager_ == nullptr) return;
  tensors_.clear();
  try {
    pager_->release(view_, written_);
  } catch (const std::exception& e) {
    // A destructor cannot throw: the write-out's error also reaches the pager's next flush.
    ZS_LOG_ERROR("paged tensors of view {} ({}): {}", view_, pager_->describe(), e.what());
  }
}

}  // namespace zs
