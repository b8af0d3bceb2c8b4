// The Backend contract's defaults for stream ordering (those of a backend of host buffers), and
// StreamRef (see backend.h, types.h).
#include "comm/backend.h"

#include <cstdio>

#include "runtime/error.h"

namespace zs::comm {

std::string StreamRef::str() const {
  if (is_host()) return "host";
  char handle[32];
  std::snprintf(handle, sizeof(handle), "%p", native);
  return device.str() + " stream " + handle;
}

void Backend::check_compute_stream(const StreamRef& stream) const {
  if (stream.is_host()) return;
  ZS_THROW(InvalidArgument, "the ", name(),
           " backend moves host memory and runs each collective on its communicator's thread, "
           "so it cannot order collectives after a device stream (",
           stream.str(),
           "); keep the default compute stream (StreamRef::host()) and order with Work::wait(), "
           "or communicate device tensors over the nccl backend");
}

std::shared_ptr<DeviceSync> Backend::prepare(CollectiveKind, const StreamRef&) { return nullptr; }

bool Backend::poll(const Call&) { return true; }

}  // namespace zs::comm
