// tests/jit/fake_device_test.cpp -- the device seam, proved with a second device: host memory
// behind the DeviceBackend interface (runtime/backend.h), with an allocator of its own, whose
// blocks are unreadable (mprotect PROT_NONE) except while the backend itself runs. Any path that
// reads or writes a device tensor's memory without going through the interface faults. On it:
// eager ops, autograd, optimizers, a traced call and a training step traced whole, each giving
// the CPU's bits.
#include <sys/mman.h>
#include <unistd.h>

#include <fmt/format.h>

#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include "jit_test_util.h"
#include "runtime/backend.h"

namespace kiln {
namespace {

using test::expect_same;

// Host memory that is readable only inside the backend's calls.
class FakeDevice final : public DeviceBackend, public Allocator {
 public:
  // While one is alive (on any thread, nested or not), every block is readable and writable.
  class Access {
   public:
    explicit Access(FakeDevice& d) : d_(d) {
      std::lock_guard<std::mutex> lock(d_.mu_);
      if (d_.depth_++ == 0) d_.protect_all(PROT_READ | PROT_WRITE);
    }
    ~Access() {
      std::lock_guard<std::mutex> lock(d_.mu_);
      if (--d_.depth_ == 0) d_.protect_all(PROT_NONE);
    }

   private:
    FakeDevice& d_;
  };

  // DeviceBackend: the CPU's kernels, run while the memory is open.
  Allocator& allocator(Device) override { return *this; }
  void run(OpId id, std::span<const Tensor> in, const Attrs& attrs, const Tensor& out) override {
    Access open(*this);
    ++runs;
    backend(cpu).run(id, in, attrs, out);
  }
  void copy(const Tensor& src, const Tensor& dst) override {
    Access open(*this);
    ++copies;
    backend(cpu).copy(src, dst);
  }
  void synchronize(Device) override { ++syncs; }

  // Allocator: one mapping per block, so each can be protected on its own.
  void* allocate(size_t nbytes) override {
    size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    size_t size = std::max<size_t>(page, (nbytes + page - 1) / page * page);
    void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw OutOfMemory(fmt::format("fake device: cannot map {} bytes", size));
    std::lock_guard<std::mutex> lock(mu_);
    if (depth_ == 0) mprotect(p, size, PROT_NONE);
    blocks_[p] = size;
    stats_.in_use += static_cast<int64_t>(nbytes);
    stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
    ++stats_.allocations;
    return p;
  }
  void deallocate(void* p, size_t nbytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = blocks_.find(p);
    ASSERT_NE(it, blocks_.end()) << "fake device: freeing a block it never gave out";
    munmap(p, it->second);
    blocks_.erase(it);
    stats_.in_use -= static_cast<int64_t>(nbytes);
  }
  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }
  void reset_peak() override {}
  void empty_cache() override {}
  void set_cache_limit(int64_t) override {}

  int64_t runs = 0, copies = 0, syncs = 0;

 private:
  void protect_all(int prot) {
    for (auto [p, size] : blocks_) mprotect(p, size, prot);
  }
  mutable std::mutex mu_;
  int depth_ = 0;
  std::map<void*, size_t> blocks_;
  AllocatorStats stats_;
};

const Device kFake = plugin(0);

// Registers a fresh fake device for one test, and removes it after.
class FakeDeviceTest : public testing::Test {
 protected:
  void SetUp() override { register_backend(DeviceType::Plugin, &dev_); }
  void TearDown() override {
    EXPECT_EQ(dev_.stats().in_use, 0) << "fake device memory still in use after the test";
    register_backend(DeviceType::Plugin, nullptr);
  }
  FakeDevice dev_;
};

TEST(Devices, AnUnregisteredDeviceIsAClearError) {
  test::expect_error([] { empty({2, 3}, f32, cuda::device(0)); }, {"device cuda:0 is not available"});
  test::expect_error([] { ones({2}).to(plugin(3)); },
                     {"device plugin:3 is not available: this program has no plugin backend"});
  EXPECT_EQ(parse_device("plugin:2"), plugin(2));
  EXPECT_EQ(parse_device("cuda"), cuda::device(0));
  test::expect_error([] { parse_device("cpu:1"); }, {"unknown device 'cpu:1'"});
  test::expect_error([] { parse_device("cuda:x"); }, {"unknown device 'cuda:x'"});
  test::expect_error([] { register_backend(DeviceType::CPU, nullptr); }, {"CPU backend cannot be replaced"});
}

TEST_F(FakeDeviceTest, ItsMemoryIsUnreadableOutsideTheBackend) {
  Tensor x = ones({4}).to(kFake);
  const float* p = static_cast<const float*>(x.data_ptr());
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // kiln's pool has threads
  EXPECT_DEATH(
      {
        volatile float v = p[0];
        (void)v;
      },
      "");
  EXPECT_EQ(x.to(cpu).to_vector<float>(), std::vector<float>(4, 1.0f));  // through the interface
}

TEST_F(FakeDeviceTest, EagerOpsGiveTheCpusBits) {
  Tensor a = randn({3, 5}), b = randn({5}), idx = from_vector(std::vector<int64_t>{4, 0, 2});
  Tensor da = a.to(kFake), db = b.to(kFake), didx = idx.to(kFake);
  EXPECT_EQ(da.device(), kFake);
  auto fn = [](const Tensor& x, const Tensor& y, const Tensor& i) {
    Tensor z = exp(x) * y + x.t().sum({0}, true).t();  // broadcasting, a view, a reduction
    z = z / scalar_tensor(3.0);                        // a 0-d CPU tensor meets the device
    z = cat({z, z.slice(1, 1, 3)}, 1);
    return matmul(z, z.t()) + index_select(z, 1, i).sum();
  };
  int64_t runs = dev_.runs;
  Tensor got = fn(da, db, didx), want = fn(a, b, idx);
  EXPECT_EQ(got.device(), kFake);
  EXPECT_GT(dev_.runs, runs + 5);
  expect_same(got.to(cpu), want);
  EXPECT_EQ(got.sum().item<float>(), want.sum().item<float>());  // item() reads through the interface
  std::ostringstream printed;
  printed << got;  // printing reads through the interface too
  EXPECT_NE(printed.str().find("plugin:0"), std::string::npos) << printed.str();
  // A CPU tensor that is not 0-d does not meet the device.
  test::expect_error([&] { da + b; },
                     {"expected all inputs on one device (or 0-d on the CPU), got f32[3,5]@plugin:0 and f32[5]"});
  // In-place ops and copies run through the backend too.
  Tensor c = zeros({3, 5}).to(kFake);
  c.add_(da).mul_(2.0);
  c.slice(1, 0, 2).copy_(da.slice(1, 3, 5));
  Tensor w = zeros({3, 5});
  w.add_(a).mul_(2.0);
  w.slice(1, 0, 2).copy_(a.slice(1, 3, 5));
  expect_same(c.to(cpu), w);
  synchronize(kFake);
  EXPECT_EQ(dev_.syncs, 1);
}

TEST_F(FakeDeviceTest, AutogradRunsOnTheDevice) {
  Tensor x = randn({4, 3}), w = randn({3, 2});
  Tensor dw = w.to(kFake).detach().requires_grad_();
  Tensor cw = w.clone().requires_grad_();
  Tensor dl = (relu(matmul(x.to(kFake), dw)) * 0.5).sum();
  Tensor cl = (relu(matmul(x, cw)) * 0.5).sum();
  dl.backward();
  cl.backward();
  EXPECT_EQ(dw.grad().device(), kFake);
  expect_same(dw.grad().to(cpu), cw.grad());
  // Gradients flow back across a move: the CPU leaf gets its gradient on the CPU.
  Tensor leaf = randn({3}).requires_grad_();
  (leaf.to(kFake) * leaf.to(kFake)).sum().backward();
  EXPECT_TRUE(leaf.grad().device().is_cpu());
  expect_same(leaf.grad(), leaf.detach() * 2.0);
}

struct DeviceMlp : nn::Module {
  nn::Linear fc1{6, 16}, fc2{16, 4};
  DeviceMlp() {
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  Tensor operator()(const Tensor& x) { return fc2(nn::dropout(gelu(fc1(x)), 0.25, is_training())); }
};

// A model trained on the fake device (eagerly, and by a step traced whole) and its twin on the
// CPU take the same steps, bit for bit: the same kernels run behind the interface.
TEST_F(FakeDeviceTest, ATrainingStepEagerAndTracedGivesTheCpusBits) {
  manual_seed(3);
  DeviceMlp on_cpu, on_eager, on_traced;
  on_eager.load_state_dict(on_cpu.state_dict());
  on_traced.load_state_dict(on_cpu.state_dict());
  on_eager.to(kFake);
  on_traced.to(kFake);
  EXPECT_EQ(on_traced.fc1.weight.device(), kFake);
  optim::AdamW opt_cpu(on_cpu.parameters(), 0.01), opt_eager(on_eager.parameters(), 0.01),
      opt_traced(on_traced.parameters(), 0.01);
  auto step = test::train_step<DeviceMlp>;
  Tensor x0 = randn({8, 6}), y0 = randint(0, 4, {8});
  jit::Function traced =
      jit::trace([&](Tensor x, Tensor y) { return step(on_traced, opt_traced, x, y); }, {x0.to(kFake), y0.to(kFake)});
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(testing::Message() << "step " << i);
    Tensor x = randn({8, 6}), y = randint(0, 4, {8});
    manual_seed(50 + i);
    Tensor want = step(on_cpu, opt_cpu, x, y);
    manual_seed(50 + i);
    Tensor eager = step(on_eager, opt_eager, x.to(kFake), y.to(kFake));
    manual_seed(50 + i);
    Tensor fast = traced(x.to(kFake), y.to(kFake));
    EXPECT_EQ(eager.device(), kFake);
    EXPECT_EQ(fast.device(), kFake);
    expect_same(eager.detach().to(cpu), want.detach());
    expect_same(fast.to(cpu), want.detach());
    auto a = on_cpu.named_parameters(), b = on_eager.named_parameters(), c = on_traced.named_parameters();
    for (size_t k = 0; k < a.size(); ++k) {
      SCOPED_TRACE(a[k].first);
      expect_same(b[k].second.to(cpu), a[k].second.detach());
      expect_same(c[k].second.to(cpu), a[k].second.detach());
    }
  }
  EXPECT_EQ(traced.stats().traces, 1);
}

// A compiled forward with its compiled backward (fast(x).backward()) on the device.
TEST_F(FakeDeviceTest, ACompiledLossAndItsBackwardRunOnTheDevice) {
  Tensor w = randn({5, 3});
  Tensor dw = w.to(kFake).detach().requires_grad_(), cw = w.clone().requires_grad_();
  auto loss = [](const Tensor& x, const Tensor& v) { return (tanh(matmul(x, v)) * x.sum({1}, true)).mean(); };
  jit::Function fast = jit::trace([&](Tensor x) { return loss(x, dw); }, {randn({4, 5}).to(kFake)});
  Tensor x = randn({4, 5});
  Tensor got = fast(x.to(kFake));
  EXPECT_EQ(got.device(), kFake);
  got.backward();
  loss(x, cw).backward();
  expect_same(got.detach().to(cpu), loss(x, cw.detach()));
  expect_same(dw.grad().to(cpu), cw.grad());
}

}  // namespace
}  // namespace kiln
