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
  bool sends_each() const override { return true; }
  char* outbox_to(int p) override {
    if (each_.empty()) {  // on first use: few sets split riders
      each_.resize(t_.size() * cap_);
      for (int q : peers_) each_ptr_.push_back(each_.data() + q * cap_);
      each_bytes_.resize(peers_.size());
    }
    return each_.data() + p * cap_;
  }
  void exchange_each(const size_t* bytes) override {
    lens_[t_.rank()] = bytes[t_.rank()];
    for (size_t i = 0; i < peers_.size(); ++i) each_bytes_[i] = bytes[peers_[i]];
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
  std::vector<const void*> each_ptr_;  // by peers_' index: outbox_to(peers_[i])
  std::vector<size_t> each_bytes_;     // exchange_each()'s, by peers_' index
};

}  // namespace

std::unique_ptr<VoteExchange> make_transport_vote_exchange(Transport& t, size_t capacity) {
  return std::make_unique<TransportVoteExchange>(t, capacity);
}

}  // namespace hvdl
