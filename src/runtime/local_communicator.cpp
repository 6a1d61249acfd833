#include "runtime/local_communicator.h"

#include <cstring>

#include "util/status.h"

namespace lmf {

class LocalGroup::Handle final : public Communicator {
 public:
  Handle(LocalGroup& g, int r) : g_(g), r_(r) {}
  int rank() const override { return r_; }
  int size() const override { return g_.n_; }
  void all_reduce_sum(float* data, int64_t n) override { g_.all_reduce_sum(r_, data, n); }

 private:
  LocalGroup& g_;
  int r_;
};

LocalGroup::LocalGroup(int n) : n_(n), ptrs_(size_t(n)), lens_(size_t(n)) {
  LMF_CHECK(n >= 1);
  for (int r = 0; r < n; ++r) handles_.push_back(std::make_unique<Handle>(*this, r));
}

LocalGroup::~LocalGroup() = default;

Communicator& LocalGroup::rank(int r) {
  LMF_CHECK(r >= 0 && r < n_);
  return *handles_[size_t(r)];
}

void LocalGroup::abort() {
  std::lock_guard lk(mu_);
  aborted_ = true;
  cv_.notify_all();
}

void LocalGroup::clear_abort() {
  std::lock_guard lk(mu_);
  aborted_ = false;
  arrived_ = 0;
}

void LocalGroup::arrive_and_wait(const std::function<void()>& last) {
  std::unique_lock lk(mu_);
  if (aborted_) LMF_FAIL("all-reduce abandoned: another tensor-parallel rank failed");
  const uint64_t gen = generation_;
  if (++arrived_ == n_) {
    arrived_ = 0;
    if (last) last();
    ++generation_;
    cv_.notify_all();
    return;
  }
  cv_.wait(lk, [&] { return generation_ != gen || aborted_; });
  if (generation_ == gen) LMF_FAIL("all-reduce abandoned: another tensor-parallel rank failed");
}

void LocalGroup::all_reduce_sum(int r, float* data, int64_t n) {
  // Writing this rank's slot is safe before the barrier: the others read the slots only between
  // the two barriers of a call, and every rank has passed the second one of the previous call.
  ptrs_[size_t(r)] = data;
  lens_[size_t(r)] = n;
  arrive_and_wait([&] {
    mismatch_.clear();
    for (int k = 1; k < n_; ++k)
      if (lens_[size_t(k)] != lens_[0])
        mismatch_ = cat("all-reduce: rank 0 sums ", lens_[0], " values, rank ", k, " ", lens_[size_t(k)]);
    // Resized here, while every rank waits: none still reads the previous call's sums.
    if (mismatch_.empty()) sum_.resize(size_t(lens_[0]));
  });
  if (!mismatch_.empty()) throw Error(mismatch_);
  // Reduce-scatter: this rank's share of the elements, added in rank order.
  const int64_t b = n * r / n_, e = n * (r + 1) / n_;
  float* s = sum_.data();
  std::memcpy(s + b, ptrs_[0] + b, size_t(e - b) * sizeof(float));
  for (int k = 1; k < n_; ++k) {
    const float* p = ptrs_[size_t(k)];
    for (int64_t i = b; i < e; ++i) s[i] += p[i];
  }
  arrive_and_wait();
  // All-gather: the whole sum back into this rank's buffer. The next call writes sum_ only after
  // its first barrier, which every rank reaches after this copy.
  std::memcpy(data, s, size_t(n) * sizeof(float));
}

}  // namespace lmf
