// distributed/nccl_unavailable.cpp -- distributed/nccl.h in a kiln built without CUDA.
#include "distributed/nccl.h"

#include "runtime/error.h"

namespace kiln::distributed {

namespace {
const char* kReason = "kiln was built without CUDA, so it has no NCCL";
}

std::unique_ptr<Backend> make_nccl_backend(TcpStore&, const Options&, int device, const std::string&, CollectiveCheck) {
  throw Error(std::string("distributed: a collective on cuda:") + std::to_string(device) + ": " + kReason);
}

bool nccl_available(std::string* why) {
  if (why) *why = kReason;
  return false;
}

}  // namespace kiln::distributed
