#include "vote_exchange.h"

#include <vector>

namespace hvdl {

namespace {

// The messages' buffers are sized once: the rounds allocate nothing.
class TransportVoteExchange final : public VoteExchange {
 public:
  TransportVoteExchange(Transport& t, size_t capacity)
      : t_(t), cap_(capacity), out_(capacity), in_(t.size() * capacity), lens_(t.size(), 0) {
    for (int p = 0; p < t.size(); ++p)
      if (p != t.rank()) peers_.push_back(p);
  }
  size_t capacity() const override { return cap_; }
  char* outbox() override { return out_.data(); }
  void exchange(size_t bytes) override {
    lens_[t_.rank()] = bytes;
    t_.exchange_all(out_.data(), bytes, in_.data(), cap_, lens_.data());
  }
  char* outbox_to(int p) override {
    if (each_.empty()) each_.resize(t_.size() * cap_);  // on first use: few sets split riders
    return each_.data() + p * cap_;
  }
  void exchange_each(const size_t* bytes) override {
    lens_[t_.rank()] = bytes[t_.rank()];
    each_ptr_.clear();
    each_bytes_.clear();
    for (int p : peers_) {
      each_ptr_.push_back(each_.data() + p * cap_);
      each_bytes_.push_back(bytes[p]);
    }
    t_.exchange_each(peers_, each_ptr_.data(), each_bytes_.data(), in_.data(), cap_, lens_.data());
  }
  const char* inbox(int p) const override {
    return p == t_.rank() ? out_.data() : in_.data() + p * cap_;
  }
  size_t length(int p) const override { return lens_[p]; }

 private:
  Transport& t_;
  size_t cap_;
  std::vector<char> out_, in_;
  std::vector<size_t> lens_;
  std::vector<int> peers_;  // every rank but this one, ascending
  std::vector<char> each_;  // exchange_each()'s messages, one capacity() per rank
  std::vector<const void*> each_ptr_;
  std::vector<size_t> each_bytes_;
};

}  // namespace

std::unique_ptr<VoteExchange> make_transport_vote_exchange(Transport& t, size_t capacity) {
  return std::make_unique<TransportVoteExchange>(t, capacity);
}

}  // namespace hvdl
