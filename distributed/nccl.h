// distributed/nccl.h -- the NCCL backend of CUDA tensors (distributed/nccl_cuda.cpp; in a kiln
// built without CUDA, distributed/nccl_unavailable.cpp, which says why). Internal.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "distributed/process_group.h"
#include "distributed/tcp_store.h"

namespace kiln::distributed {

/// Runs before each collective (the group's Options::check, through Gloo): throws kiln::Error
/// naming a mismatch across the ranks or a rank that did not arrive.
using CollectiveCheck = std::function<void(const char* name, const Tensor& t)>;

/// The group's collectives on cuda:`device`: joins NCCL's communicator through the group's
/// store (rank 0 puts the unique id under `key`; every rank makes its backend at the same
/// point, the group's first collective on that device). `check`, when set, runs before each
/// collective. Throws kiln::Error when NCCL is not available, naming why.
std::unique_ptr<Backend> make_nccl_backend(TcpStore& store, const Options& options, int device, const std::string& key,
                                           CollectiveCheck check);

/// Whether NCCL loaded (KILN_CUDA_NCCL, else libnccl.so.2), and if not why.
bool nccl_available(std::string* why = nullptr);

}  // namespace kiln::distributed
