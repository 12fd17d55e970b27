// A counting budget of bytes shared by the threads that decode images (decode_budget.h).
#include "vit/io/decode_budget.h"

#include <algorithm>

#include "vit/io/image_header.h"

namespace vitpe {

DecodeBudget& DecodeBudget::shared() {
  static DecodeBudget budget(kMaxDecodedImageBytes);
  return budget;
}

DecodeBudget::Hold& DecodeBudget::Hold::operator=(Hold&& o) noexcept {
  if (this != &o) {
    release();
    budget_ = o.budget_;
    bytes_ = o.bytes_;
    o.budget_ = nullptr;
  }
  return *this;
}

void DecodeBudget::Hold::release() {
  if (budget_ != nullptr) budget_->give_back(bytes_);
  budget_ = nullptr;
}

DecodeBudget::Hold DecodeBudget::reserve(int64_t bytes) {
  bytes = std::clamp<int64_t>(bytes, 0, capacity_);
  std::unique_lock<std::mutex> lock(mutex_);
  freed_.wait(lock, [&] { return in_use_ + bytes <= capacity_; });
  in_use_ += bytes;
  peak_ = std::max(peak_, in_use_);
  return Hold(this, bytes);
}

void DecodeBudget::give_back(int64_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    in_use_ -= bytes;
  }
  freed_.notify_all();
}

int64_t DecodeBudget::in_use() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_use_;
}

int64_t DecodeBudget::peak() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_;
}

}  // namespace vitpe
