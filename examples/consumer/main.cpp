// Route 4 tokens x top-2 over 4 experts, then sum 2 expert outputs per token. Exits 0 on success,
// 77 when the backend cannot run on this machine (e.g. no GPU), 1 on a wrong answer.
#include <cstdio>
#include <vector>

#include <moe/routing.hpp>

int main() {
  try {
    moe::check_backend();
  } catch (const moe::Error& e) {
    std::printf("skipped: %s\n", e.what());
    return 77;
  }
  const std::vector<std::int32_t> ids{2, 0, 1, 2, 0, 3, 2, 1};  // [4 tokens, topk 2]
  const std::int64_t numel = 8;
  const std::int32_t experts = 4, block = 4;
  moe::device_buffer<std::int32_t> d_ids(numel), sorted(moe::align_max_padded(numel, experts, block)),
      expert_ids(moe::align_max_blocks(numel, experts, block)), post(1);
  moe::device_buffer<unsigned char> ws(moe::align_workspace_size(numel, experts, block));
  moe::copy_to_device(d_ids.data(), ids.data(), numel * sizeof(std::int32_t));
  moe::align_block_size(d_ids.data(), numel, experts, block, sorted.data(), expert_ids.data(), post.data(),
                        ws.data(), ws.size());
  std::vector<std::int32_t> h(sorted.size());
  std::int32_t total = 0;
  moe::copy_to_host(h.data(), sorted.data(), sorted.bytes());
  moe::copy_to_host(&total, post.data(), sizeof total);
  std::printf("backend %s: %d padded slots:", moe::backend_name(), total);
  for (std::int32_t i = 0; i < total; ++i) std::printf(" %d", h[i]);
  std::printf("\n");
  // expert 0: 1,4 | expert 1: 2,7 | expert 2: 0,3,6 | expert 3: 5 (8 = sentinel)
  const std::vector<std::int32_t> want{1, 4, 8, 8, 2, 7, 8, 8, 0, 3, 6, 8, 5, 8, 8, 8};
  if (total != 16 || std::vector<std::int32_t>(h.begin(), h.begin() + 16) != want) return 1;

  const std::vector<float> x{1, 2, 3, 4, 5, 6, 7, 8};  // [2 tokens, topk 2, hidden 2]
  moe::device_buffer<float> d_x(8), d_y(4);
  moe::copy_to_device(d_x.data(), x.data(), sizeof(float) * 8);
  moe::sum(d_x.data(), 2, 2, 2, d_y.data());
  std::vector<float> y(4);
  moe::copy_to_host(y.data(), d_y.data(), sizeof(float) * 4);
  return y == std::vector<float>{4, 6, 12, 14} ? 0 : 1;
}
