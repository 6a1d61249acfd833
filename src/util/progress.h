// Progress for long work (loading, conversion): a redrawn bar on a terminal, plain lines
// (at most one every few seconds) otherwise. Writes to stderr.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

namespace lmf {

class Progress {
 public:
  // interval_s: the least time between two updates shown (< 0: 0.1 s on a terminal, 3 s
  // otherwise); also how long the work must run before the first one is.
  Progress(std::string label, uint64_t total_bytes, bool enabled = true, double interval_s = -1);
  // done_items/total_items are shown as "k/n"; bytes drive the rate and ETA. The last item is
  // shown at once when an earlier update was (the bar ends at 100 %), else like any other.
  void update(uint64_t bytes_done, int64_t items_done, int64_t items_total);
  // The "done in" line; with always = false only when an update was shown (a short load that
  // drew nothing stays silent).
  void finish(bool always = true);

 private:
  std::string label_;
  uint64_t total_;
  bool enabled_, tty_;
  double interval_;
  bool finished_ = false;
  bool shown_ = false;  // an update was printed
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace lmf
