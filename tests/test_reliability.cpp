// Memory safety of the public API (issue 32): allocation sizes that overflow, buffers of one call that
// overlap, misaligned workspaces, zero ids, and block sizes whose block ends pass INT32_MAX. Each case failed
// (or corrupted memory) before the fix it tests.
#include <cstdlib>

#include "support.hpp"

using namespace moe_test;

namespace {

template <class F>
moe_status_t status_of(F&& f) {
  try {
    f();
  } catch (const moe::Error& e) {
    return e.status();
  }
  return MOE_SUCCESS;
}

std::uintptr_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

}  // namespace

// ---- 1. allocation sizes ---------------------------------------------------------------------------------

TEST_CASE("reliability: moe_malloc refuses sizes above PTRDIFF_MAX and leaves the pointer NULL") {
  const std::size_t huge[] = {SIZE_MAX, SIZE_MAX - 3, SIZE_MAX - 255, static_cast<std::size_t>(PTRDIFF_MAX) + 1,
                              // the realistic trigger: a size computed from an unchecked -1
                              static_cast<std::size_t>(moe_align_max_padded(-1, 8, 4)) * sizeof(std::int32_t)};
  for (const std::size_t bytes : huge) {
    INFO("bytes = " << bytes);
    void* p = reinterpret_cast<void*>(0x100);
    CHECK_C_ERROR(moe_malloc(&p, bytes), MOE_ERROR_INVALID_ARGUMENT, "PTRDIFF_MAX");
    CHECK(p == nullptr);
    CHECK(status_of([&] { moe::free(moe::malloc(bytes)); }) == MOE_ERROR_INVALID_ARGUMENT);
  }
}

TEST_CASE("reliability: a failed allocation leaves no error behind for the next calls") {
  // 2^60 bytes: below PTRDIFF_MAX, so the backend tries (and fails: MOE_ERROR_BACKEND; under ASan this needs
  // allocator_may_return_null=1, as tools/sanitize.sh sets). A GPU runtime's last error must not leak into the
  // next launch's check.
  void* p = reinterpret_cast<void*>(0x100);
  const moe_status_t st = moe_malloc(&p, std::size_t{1} << 60);
  CHECK_MESSAGE((st == MOE_ERROR_BACKEND || st == MOE_SUCCESS), moe_last_error());
  if (st != MOE_SUCCESS) CHECK(p == nullptr);
  CHECK(moe_free(p) == MOE_SUCCESS);
  Rng rng(17);
  check_align(uniform_ids<std::int32_t>(100, 8, rng), 8, 4);
  check_align(uniform_ids<std::int32_t>(5000, 300, rng), 300, 16);
}

TEST_CASE("reliability: device_buffer refuses counts whose bytes overflow") {
  // SIZE_MAX / 4 + 1 int32s are 2^64 bytes: the product wraps to 0 (a NULL "buffer" of 2^62 elements)
  CHECK(status_of([] { moe::device_buffer<std::int32_t> b(SIZE_MAX / 4 + 1); }) == MOE_ERROR_INVALID_ARGUMENT);
  CHECK(status_of([] { moe::device_buffer<std::int32_t> b(SIZE_MAX / 4 + 2); }) == MOE_ERROR_INVALID_ARGUMENT);
  CHECK(status_of([] { moe::device_buffer<double> b(SIZE_MAX / 2); }) == MOE_ERROR_INVALID_ARGUMENT);
  CHECK(status_of([] {
          moe::device_buffer<std::int32_t> b(static_cast<std::size_t>(PTRDIFF_MAX) / 4 + 1);
        }) == MOE_ERROR_INVALID_ARGUMENT);
  try {
    moe::device_buffer<std::int64_t> b(SIZE_MAX / 8 + 1);
    FAIL("accepted");
  } catch (const moe::Error& e) {
    CHECK(std::string(e.what()).find("device_buffer") != std::string::npos);
  }
  moe::device_buffer<std::int32_t> ok(1000);  // and sane counts still allocate
  CHECK(ok.data() != nullptr);
  CHECK(ok.bytes() == 4000);
}

// ---- 3. alignment ----------------------------------------------------------------------------------------

TEST_CASE("reliability: every moe_malloc pointer is aligned to MOE_WORKSPACE_ALIGNMENT") {
  CHECK(MOE_WORKSPACE_ALIGNMENT == 256);
  std::vector<void*> blocks;
  for (int round = 0; round < 4; ++round)
    for (const std::size_t bytes : {1, 3, 4, 63, 64, 100, 255, 256, 257, 1000, 4096, 65537}) {
      void* p = nullptr;
      REQUIRE(moe_malloc(&p, bytes) == MOE_SUCCESS);
      CHECK_MESSAGE(address(p) % MOE_WORKSPACE_ALIGNMENT == 0, "moe_malloc(" << bytes << ") gave " << p);
      blocks.push_back(p);
    }
  // the whole block is usable (ASan/the allocator would see an overrun)
  const std::vector<unsigned char> ones(65537, 1);
  void* last = blocks.back();
  moe::copy_to_device(last, ones.data(), ones.size());
  std::vector<unsigned char> back(ones.size());
  moe::copy_to_host(back.data(), last, back.size());
  CHECK(back == ones);
  for (void* p : blocks) CHECK(moe_free(p) == MOE_SUCCESS);
}

TEST_CASE("reliability: a misaligned workspace is refused") {
  const std::int64_t numel = 64;
  const std::int32_t E = 8, bs = 4;
  Rng rng(3);
  const auto ids = uniform_ids<std::int32_t>(static_cast<std::size_t>(numel), E, rng);
  auto d_ids = to_device(ids);
  moe::device_buffer<std::int32_t> sorted(static_cast<std::size_t>(moe::align_max_padded(numel, E, bs)));
  moe::device_buffer<std::int32_t> experts(static_cast<std::size_t>(moe::align_max_blocks(numel, E, bs)));
  moe::device_buffer<std::int32_t> post(1);
  const std::size_t need = moe::align_workspace_size(numel, E, bs);
  moe::device_buffer<unsigned char> ws(need + 2 * MOE_WORKSPACE_ALIGNMENT);
  for (const std::size_t offset : {1, 4, 8, 16, 64, 128, 255}) {
    INFO("offset " << offset);
    CHECK_C_ERROR(moe_align_block_size(d_ids.data(), MOE_INT32, numel, E, bs, sorted.data(), experts.data(),
                                        post.data(), ws.data() + offset, need + 8, nullptr),
                   MOE_ERROR_INVALID_ARGUMENT, "aligned");
    CHECK(std::string(moe_last_error()).find("workspace") != std::string::npos);
  }
  // the next 256-byte boundary is fine, and gives the reference's result
  REQUIRE(moe_align_block_size(d_ids.data(), MOE_INT32, numel, E, bs, sorted.data(), experts.data(), post.data(),
                               ws.data() + MOE_WORKSPACE_ALIGNMENT, need, nullptr) == MOE_SUCCESS);
  moe::synchronize();
  const AlignResult ref = reference_align(ids, E, bs);
  CHECK(to_host(sorted) == ref.sorted_token_ids);
  CHECK(to_host(experts) == ref.expert_ids);
  CHECK(to_host(post)[0] == ref.num_tokens_post_pad);
}

TEST_CASE("reliability: the host reference needs an int32-aligned workspace only") {
  const std::vector<std::int32_t> ids{0, 1, 2, 1, 2, 3, 0, 3, 4};
  std::vector<std::int32_t> sorted(24), experts(6), ws(16);
  std::int32_t post = -1;
  auto* bytes = reinterpret_cast<unsigned char*>(ws.data());
  CHECK(status_of([&] {
          moe::reference::align_block_size(ids.data(), 9, 5, 4, sorted.data(), experts.data(), &post, bytes + 4, 32);
        }) == MOE_SUCCESS);
  CHECK(post == 20);
  CHECK(status_of([&] {
          moe::reference::align_block_size(ids.data(), 9, 5, 4, sorted.data(), experts.data(), &post, bytes + 2, 32);
        }) == MOE_ERROR_INVALID_ARGUMENT);
}

// ---- zero ids: the same workspace rule on every backend ----------------------------------------------------

TEST_CASE("reliability: zero ids need no workspace on any backend") {
  for (const std::int32_t E : {1, 8, 1024, 65536})
    for (const std::int32_t bs : {1, 16, 1 << 20}) {
      INFO("experts " << E << " block_size " << bs);
      std::size_t bytes = 123;
      REQUIRE(moe_align_workspace_size(0, E, bs, &bytes) == MOE_SUCCESS);
      CHECK(bytes == 0);
      CHECK(moe::reference::align_workspace_size(0, E, bs) == 0);
      moe::device_buffer<std::int32_t> post(1);
      const std::int32_t poison = kPoison;
      moe::copy_to_device(post.data(), &poison, sizeof poison);
      CHECK(moe_align_block_size(nullptr, MOE_INT16, 0, E, bs, nullptr, nullptr, post.data(), nullptr, 0, nullptr) ==
            MOE_SUCCESS);
      moe::synchronize();
      CHECK(to_host(post)[0] == 0);
      std::int32_t host_post = -1;
      moe::reference::align_block_size(static_cast<const std::int32_t*>(nullptr), 0, E, bs, nullptr, nullptr,
                                       &host_post, nullptr, 0);
      CHECK(host_post == 0);
    }
}

// ---- 2. overlapping buffers ------------------------------------------------------------------------------

namespace {

// The five buffers of an align call, each at the start of its own slot of an arena in the backend's memory; a
// slot is twice the largest buffer, so a buffer moved onto either end of another one overlaps that one only.
struct AlignArena {
  static constexpr int kIds = 0, kSorted = 1, kExperts = 2, kPost = 3, kWs = 4, kCount = 5;
  static constexpr const char* kNames[kCount] = {"topk_ids", "sorted_token_ids", "expert_ids", "num_tokens_post_pad",
                                                 "workspace"};
  std::int64_t numel = 64;
  std::int32_t E = 8, bs = 4;
  std::vector<std::int32_t> ids;
  std::size_t bytes[kCount] = {};
  std::size_t slot = 0;
  moe::device_buffer<unsigned char> arena;

  AlignArena() {
    Rng rng(11);
    ids = uniform_ids<std::int32_t>(static_cast<std::size_t>(numel), E, rng, 0.1);
    bytes[kIds] = ids.size() * sizeof(std::int32_t);
    bytes[kSorted] = static_cast<std::size_t>(moe::align_max_padded(numel, E, bs)) * sizeof(std::int32_t);
    bytes[kExperts] = static_cast<std::size_t>(moe::align_max_blocks(numel, E, bs)) * sizeof(std::int32_t);
    bytes[kPost] = sizeof(std::int32_t);
    // a declared workspace of at least 256 bytes, also where this backend needs none for the shape
    bytes[kWs] = std::max<std::size_t>(moe::align_workspace_size(numel, E, bs), MOE_WORKSPACE_ALIGNMENT);
    std::size_t largest = 0;
    for (std::size_t b : bytes) largest = std::max(largest, b);
    slot = (2 * largest + MOE_WORKSPACE_ALIGNMENT - 1) / MOE_WORKSPACE_ALIGNMENT * MOE_WORKSPACE_ALIGNMENT;
    arena = moe::device_buffer<unsigned char>(slot * (kCount + 2));
  }
  // slot 0 stays free: a buffer moved to end where the first one starts still lies inside the arena
  std::size_t home(int b) const { return slot * static_cast<std::size_t>(b + 1); }
  // align with each buffer at the given arena offset; ids copied in first
  moe_status_t call(const std::size_t (&at)[kCount]) {
    unsigned char* a = arena.data();
    moe::copy_to_device(a + at[kIds], ids.data(), bytes[kIds]);
    return moe_align_block_size(a + at[kIds], MOE_INT32, numel, E, bs,
                                reinterpret_cast<std::int32_t*>(a + at[kSorted]),
                                reinterpret_cast<std::int32_t*>(a + at[kExperts]),
                                reinterpret_cast<std::int32_t*>(a + at[kPost]), a + at[kWs], bytes[kWs], nullptr);
  }
  // the outputs at those offsets against the reference
  void check_outputs(const std::size_t (&at)[kCount]) const {
    moe::synchronize();
    std::vector<unsigned char> host(arena.size());
    moe::copy_to_host(host.data(), arena.data(), host.size());
    auto ints = [&](int b) {
      std::vector<std::int32_t> v(bytes[b] / sizeof(std::int32_t));
      std::memcpy(v.data(), host.data() + at[b], bytes[b]);
      return v;
    };
    const AlignResult ref = reference_align(ids, E, bs);
    CHECK(ints(kSorted) == ref.sorted_token_ids);
    CHECK(ints(kExperts) == ref.expert_ids);
    CHECK(ints(kPost)[0] == ref.num_tokens_post_pad);
  }
};

}  // namespace

TEST_CASE("reliability: align refuses any two overlapping buffers, naming both") {
  AlignArena w;
  std::size_t at[AlignArena::kCount];
  for (int b = 0; b < AlignArena::kCount; ++b) at[b] = w.home(b);
  REQUIRE(w.call(at) == MOE_SUCCESS);
  w.check_outputs(at);

  for (int a = 0; a < AlignArena::kCount; ++a)
    for (int b = a + 1; b < AlignArena::kCount; ++b) {
      // move a buffer that needs only int32 alignment: never the workspace
      const int fixed = b == AlignArena::kWs ? b : a, mover = b == AlignArena::kWs ? a : b;
      INFO(AlignArena::kNames[mover] << " moved onto " << AlignArena::kNames[fixed]);
      std::size_t moved[AlignArena::kCount];
      std::copy(at, at + AlignArena::kCount, moved);
      const std::size_t end = at[fixed] + w.bytes[fixed];
      // sharing the fixed buffer's last int32, its first byte, or starting where it starts
      for (const std::size_t to : {end - 4, at[fixed] - w.bytes[mover] + 4, at[fixed]}) {
        moved[mover] = to;
        CHECK_C_ERROR(w.call(moved), MOE_ERROR_INVALID_ARGUMENT, AlignArena::kNames[a]);
        CHECK(std::string(moe_last_error()).find(AlignArena::kNames[b]) != std::string::npos);
        CHECK(std::string(moe_last_error()).find("overlaps") != std::string::npos);
      }
      // touching is not overlapping: right after the fixed buffer, or ending where it starts
      for (const std::size_t to : {end, at[fixed] - w.bytes[mover]}) {
        moved[mover] = to;
        REQUIRE_MESSAGE(w.call(moved) == MOE_SUCCESS, moe_last_error());
        w.check_outputs(moved);
      }
    }
}

TEST_CASE("reliability: the issue's two corruptions: workspace inside sorted_token_ids, num_tokens_post_pad inside "
          "the workspace") {
  AlignArena w;
  std::size_t at[AlignArena::kCount];
  for (int b = 0; b < AlignArena::kCount; ++b) at[b] = w.home(b);
  std::size_t moved[AlignArena::kCount];
  std::copy(at, at + AlignArena::kCount, moved);
  moved[AlignArena::kWs] = at[AlignArena::kSorted];
  CHECK_C_ERROR(w.call(moved), MOE_ERROR_INVALID_ARGUMENT, "sorted_token_ids");
  std::copy(at, at + AlignArena::kCount, moved);
  moved[AlignArena::kPost] = at[AlignArena::kWs] + 8;
  CHECK_C_ERROR(w.call(moved), MOE_ERROR_INVALID_ARGUMENT, "num_tokens_post_pad");
}

TEST_CASE("reliability: moe_sum refuses overlap by one element, accepts touching buffers") {
  const std::int64_t tokens = 4, hidden = 8;
  const std::int32_t topk = 3;
  const std::size_t in_elems = tokens * topk * hidden, out_elems = tokens * hidden;
  moe::device_buffer<float> arena(3 * in_elems);
  float* in = arena.data() + in_elems;
  std::vector<float> x(in_elems);
  for (std::size_t i = 0; i < in_elems; ++i) x[i] = static_cast<float>(i % 17) - 3.0f;
  moe::copy_to_device(in, x.data(), in_elems * sizeof(float));
  std::vector<float> want(out_elems);
  moe::reference::sum(x.data(), tokens, topk, hidden, want.data());
  for (float* out : {in + in_elems - 1, in - out_elems + 1, in + 5})
    CHECK_C_ERROR(moe_sum(in, MOE_FLOAT32, tokens, topk, hidden, out, nullptr), MOE_ERROR_INVALID_ARGUMENT,
                   "overlaps");
  for (float* out : {in + in_elems, in - out_elems}) {
    REQUIRE(moe_sum(in, MOE_FLOAT32, tokens, topk, hidden, out, nullptr) == MOE_SUCCESS);
    moe::synchronize();
    std::vector<float> got(out_elems);
    moe::copy_to_host(got.data(), out, out_elems * sizeof(float));
    CHECK(got == want);
  }
}

// ---- 5. block ends past INT32_MAX --------------------------------------------------------------------------

namespace {

// One expert, `numel` ids all on it, block_size bs: one block of ids and the tail [bs, max_padded) of
// sentinels. Checks the ids, the first padding, the LAST tail entries and expert_ids without copying the
// whole (GiB) output back.
void check_huge_block(std::int64_t numel, std::int32_t bs) {
  const std::int64_t max_padded = moe::align_max_padded(numel, 1, bs);
  const std::int64_t max_blocks = moe::align_max_blocks(numel, 1, bs);
  INFO("numel " << numel << " block_size " << bs << " max_padded " << max_padded);
  const std::vector<std::int32_t> ids(static_cast<std::size_t>(numel), 0);
  auto d_ids = to_device(ids);
  moe::device_buffer<std::int32_t> sorted(static_cast<std::size_t>(max_padded));
  moe::device_buffer<std::int32_t> experts(static_cast<std::size_t>(max_blocks));
  moe::device_buffer<std::int32_t> post(1);
  moe::device_buffer<unsigned char> ws(moe::align_workspace_size(numel, 1, bs));
  const std::vector<std::int32_t> poison(16, kPoison);
  std::int32_t* last = sorted.data() + max_padded - 8;
  moe::copy_to_device(last, poison.data(), 8 * sizeof(std::int32_t));
  moe::copy_to_device(sorted.data(), poison.data(), 16 * sizeof(std::int32_t));
  moe::align_block_size(d_ids.data(), numel, 1, bs, sorted.data(), experts.data(), post.data(), ws.data(), ws.size());
  moe::synchronize();
  std::vector<std::int32_t> head(16), tail(8);
  moe::copy_to_host(head.data(), sorted.data(), head.size() * sizeof(std::int32_t));
  moe::copy_to_host(tail.data(), last, tail.size() * sizeof(std::int32_t));
  const auto sentinel = static_cast<std::int32_t>(numel);
  for (std::int64_t i = 0; i < 16; ++i) CHECK(head[static_cast<std::size_t>(i)] == (i < numel ? i : sentinel));
  for (std::size_t i = 0; i < tail.size(); ++i) CHECK_MESSAGE(tail[i] == sentinel, "tail entry " << max_padded - 8 + static_cast<std::int64_t>(i));
  CHECK(to_host(post)[0] == bs);
  std::vector<std::int32_t> want_experts(static_cast<std::size_t>(max_blocks), -1);
  want_experts[0] = 0;
  CHECK(to_host(experts) == want_experts);
}

bool huge_tests_enabled() {
  const std::string name = moe::backend_name();
  const char* env = std::getenv("MOE_TEST_HUGE");
  return name == "cuda" || name == "hip" || (env != nullptr && std::string(env) == "1");
}

}  // namespace

TEST_CASE("reliability: block_size 2^30 writes the last tail entry (4 GiB of output)") {
  // max_padded = 3 + 2^30 - 1: block 1 starts at 2^30 and would end at 2^31, past INT32_MAX
  check_huge_block(3, 1 << 30);
}

TEST_CASE("reliability: a padded length of exactly INT32_MAX (8 GiB of output; GPU backends or MOE_TEST_HUGE=1)") {
  if (!huge_tests_enabled()) return;
  // 9 ids (the GPU's one-launch path), block_size INT32_MAX - 8: the padding loop runs up to INT32_MAX - 8, and a
  // lane's next index, INT32_MAX - 8 + 32, does not fit an int32
  check_huge_block(9, std::numeric_limits<std::int32_t>::max() - 8);
  // 2049 ids (the multi-block paths)
  check_huge_block(2049, std::numeric_limits<std::int32_t>::max() - 2048);
}
