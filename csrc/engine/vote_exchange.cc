#include "vote_exchange.h"

#include <vector>

namespace hvdl {

namespace {

// The messages' buffers are sized once: the rounds allocate nothing.
class TransportVoteExchange final : public VoteExchange {
 public:
  TransportVoteExchange(Transport& t, size_t capacity)
      : t_(t), cap_(capacity), out_(capacity), in_(t.size() * capacity), lens_(t.size(), 0) {}
  size_t capacity() const override { return cap_; }
  char* outbox() override { return out_.data(); }
  void exchange(size_t bytes) override {
    lens_[t_.rank()] = bytes;
    t_.exchange_all(out_.data(), bytes, in_.data(), cap_, lens_.data());
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
};

}  // namespace

std::unique_ptr<VoteExchange> make_transport_vote_exchange(Transport& t, size_t capacity) {
  return std::make_unique<TransportVoteExchange>(t, capacity);
}

}  // namespace hvdl
