// The memory that decoded images may hold at once, across threads: preprocess_files decodes a
// batch in parallel, and without a shared bound N threads could each hold an image at the
// per-image limit (kMaxDecodedImageBytes). Each decode reserves its header's worth before
// OpenCV allocates and keeps it until the image is preprocessed; a reservation that does not fit
// waits for others to finish. One image never waits for itself: a reservation larger than the
// capacity is cut to it (so it runs alone).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace vitpe {

class DecodeBudget {
 public:
  explicit DecodeBudget(int64_t capacity) : capacity_(capacity) {}
  DecodeBudget(const DecodeBudget&) = delete;
  DecodeBudget& operator=(const DecodeBudget&) = delete;

  // The process-wide budget read_image and preprocess_files use: kMaxDecodedImageBytes.
  static DecodeBudget& shared();

  // A reservation, released when it is destroyed (or moved from and then destroyed).
  class Hold {
   public:
    Hold() = default;
    Hold(Hold&& o) noexcept : budget_(o.budget_), bytes_(o.bytes_) { o.budget_ = nullptr; }
    Hold& operator=(Hold&& o) noexcept;
    Hold(const Hold&) = delete;
    Hold& operator=(const Hold&) = delete;
    ~Hold() { release(); }
    int64_t bytes() const { return budget_ != nullptr ? bytes_ : 0; }

   private:
    friend class DecodeBudget;
    Hold(DecodeBudget* b, int64_t bytes) : budget_(b), bytes_(bytes) {}
    void release();
    DecodeBudget* budget_ = nullptr;
    int64_t bytes_ = 0;
  };

  // Blocks until `bytes` (at most the capacity) fit beside the reservations in force.
  Hold reserve(int64_t bytes);

  int64_t capacity() const { return capacity_; }
  int64_t in_use() const;
  int64_t peak() const;  // the most ever reserved at once

 private:
  void give_back(int64_t bytes);
  const int64_t capacity_;
  mutable std::mutex mutex_;
  std::condition_variable freed_;
  int64_t in_use_ = 0, peak_ = 0;
};

}  // namespace vitpe
