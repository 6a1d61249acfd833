#include "util/progress.h"

#include <unistd.h>

#include <cstdio>

namespace lmf {

Progress::Progress(std::string label, uint64_t total, bool enabled, double interval_s)
    : label_(std::move(label)),
      total_(total),
      enabled_(enabled),
      tty_(isatty(2) != 0),
      interval_(interval_s >= 0 ? interval_s : tty_ ? 0.1 : 3.0) {
  start_ = last_ = std::chrono::steady_clock::now();
}

void Progress::update(uint64_t done, int64_t items, int64_t items_total) {
  if (!enabled_ || finished_) return;
  auto now = std::chrono::steady_clock::now();
  double since_last = std::chrono::duration<double>(now - last_).count();
  // A load or conversion shorter than the interval draws nothing (it would be a "100 %" line at
  // an instant's rate); a bar already drawn is finished at 100 %.
  const bool complete_bar = items == items_total && shown_;
  if (!complete_bar && since_last < interval_) return;
  last_ = now;
  shown_ = true;
  double el = std::chrono::duration<double>(now - start_).count();
  double rate = el > 0 ? done / el : 0;
  double eta = rate > 0 && total_ > done ? (total_ - done) / rate : 0;
  double frac = total_ ? double(done) / double(total_) : 1.0;
  if (tty_) {
    int w = 30, f = int(frac * w);
    std::fprintf(stderr, "\r%s [%-*s] %3d%% %lld/%lld  %.0f MB/s  ETA %.0fs   ", label_.c_str(), w,
                 std::string(size_t(f), '#').c_str(), int(frac * 100), (long long)items,
                 (long long)items_total, rate / 1e6, eta);
  } else {
    std::fprintf(stderr, "%s: %d%% (%lld/%lld, %.0f MB/s, ETA %.0fs)\n", label_.c_str(), int(frac * 100),
                 (long long)items, (long long)items_total, rate / 1e6, eta);
  }
  std::fflush(stderr);
}

void Progress::finish(bool always) {
  if (!enabled_ || finished_) return;
  finished_ = true;
  if (!always && !shown_) return;
  double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::fprintf(stderr, "%s%s: done in %.1fs\n", tty_ ? "\r\033[K" : "", label_.c_str(), el);
}

}  // namespace lmf
