// Alltoall: rank r sends rows [sum(splits[:j]), +splits[j]) of its tensor to rank j
// and receives, concatenated in rank order, what every rank sent it. The coordinator
// checks every rank's splits and puts the whole N x N matrix in Response.sizes, so
// each rank knows what it will receive (its output size and the received splits)
// before any data moves.
#include <cstring>

#include "../../collectives/alltoall.h"
#include "op_util.h"

namespace hvdl {
namespace {
using namespace ops;

std::string splits_str(const std::vector<int64_t>& s) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "]";
  return os.str();
}

class AlltoallOp : public CollectiveOp {
 public:
  OpType type() const override { return OpType::ALLTOALL; }

  void validate(const std::vector<const Request*>& reqs, Response& resp) const override {
    if (!check_not_scalar(reqs, resp, "alltoall splits along dim 0") ||
        !check_trailing_dims(reqs, resp))
      return;
    const int n = static_cast<int>(reqs.size());
    std::vector<std::string> problems;
    resp.sizes.assign(static_cast<size_t>(n) * n, 0);
    for (int r = 0; r < n; ++r) {
      const Request* q = reqs[r];
      if (!q) continue;
      const int64_t d0 = q->shape[0];
      std::string rank = "rank " + std::to_string(r);
      if (q->splits.empty()) {
        if (d0 % n != 0) {
          problems.push_back(rank + ": first dimension " + std::to_string(d0) +
                             " is not divisible by the process set size " + std::to_string(n) +
                             "; pass splits= to divide it unevenly");
          continue;
        }
        for (int j = 0; j < n; ++j) resp.sizes[r * n + j] = d0 / n;
        continue;
      }
      if (static_cast<int>(q->splits.size()) != n) {
        problems.push_back(rank + ": splits " + splits_str(q->splits) + " has " +
                           std::to_string(q->splits.size()) + " entries, expected one per rank (" +
                           std::to_string(n) + ")");
        continue;
      }
      int64_t sum = 0;
      bool negative = false;
      for (auto s : q->splits) sum += s, negative |= s < 0;
      if (negative) {
        problems.push_back(rank + ": splits " + splits_str(q->splits) + " has a negative entry");
        continue;
      }
      if (sum != d0) {
        problems.push_back(rank + ": splits " + splits_str(q->splits) + " sum to " +
                           std::to_string(sum) + " but the first dimension is " + std::to_string(d0));
        continue;
      }
      for (int j = 0; j < n; ++j) resp.sizes[r * n + j] = q->splits[j];
    }
    if (!problems.empty()) {
      std::string msg = op_prefix(*first_present(reqs)) + "invalid splits: ";
      for (size_t i = 0; i < problems.size(); ++i) msg += (i ? "; " : "") + problems[i];
      resp.error = msg;
      resp.error_kind = Response::VALUE_ERROR;  // wrong on their face: Horovod raises ValueError
      resp.sizes.clear();
      return;
    }
    resp.shape = first_present(reqs)->shape;
  }

  void execute(ExecContext& ctx, const std::vector<const Response*>& group,
               const std::vector<TensorEntry*>& entries) const override {
    Transport& t = ctx.transport;
    const int n = t.size(), me = t.rank();
    for (size_t k = 0; k < group.size(); ++k) {
      const Response& resp = *group[k];
      const size_t rb = row_bytes(resp.shape, resp.dtype);
      std::vector<size_t> send_off(n), send_bytes(n), recv_off(n), recv_bytes(n);
      std::vector<int64_t> received(n);
      size_t so = 0, ro = 0;
      for (int j = 0; j < n; ++j) {
        send_off[j] = so;
        send_bytes[j] = static_cast<size_t>(resp.sizes[me * n + j]) * rb;
        so += send_bytes[j];
        received[j] = resp.sizes[j * n + me];
        recv_off[j] = ro;
        recv_bytes[j] = static_cast<size_t>(received[j]) * rb;
        ro += recv_bytes[j];
      }
      auto out = OutputPool::get().allocate(ro);
      {
        PhaseScope p(ctx.phases, "ALLTOALL");
        alltoallv(t, entries[k]->input, send_off, send_bytes, out.get(), recv_off, recv_bytes);
      }
      int64_t rows = 0;
      for (auto x : received) rows += x;
      set_output(entries[k], std::move(out), with_dim0(resp.shape, rows), resp.dtype, received);
    }
  }
};

OpRegistrar reg(std::make_unique<AlltoallOp>());

}  // namespace
}  // namespace hvdl
