// moe_permute: golden cases by hand, the row count read on the device (clamped to max_rows, negative = 0), ids
// outside [0, numel) as padding, random sweeps over every dtype (fp8 included: bytes, never canonicalised),
// sizes and alignments against the reference byte for byte with poisoned outputs, and every error path.
// Round trips with moe_combine are in test_combine.cpp.
#include <algorithm>

#include "datapath.hpp"

using namespace moe_test;
using namespace moe_test::dp;

namespace {

constexpr unsigned char kPoisonByte = 0xA5;  // what an unwritten byte of permuted holds

const moe_dtype_t kAllDtypes[] = {MOE_INT8,    MOE_UINT8,   MOE_INT16,    MOE_INT32,       MOE_INT64,
                                  MOE_FLOAT32, MOE_FLOAT16, MOE_BFLOAT16, MOE_FLOAT8_E4M3, MOE_FLOAT8_E5M2};

struct PermuteCall {
  moe_dtype_t dtype = MOE_BFLOAT16;
  std::int64_t tokens = 0, hidden_size = 0, max_rows = 0;
  std::int32_t topk = 1;
  std::vector<std::int32_t> sorted;  // as many entries as the caller has (>= min(post_pad, max_rows))
  std::int32_t post_pad = 0;
  std::size_t in_offset = 0, out_offset = 0;  // bytes past a 16-byte aligned allocation
  std::size_t esize() const { return moe::dtype_size(dtype); }
  std::size_t row_bytes() const { return static_cast<std::size_t>(hidden_size) * esize(); }
};

std::vector<unsigned char> random_bytes(std::size_t n, Rng& rng) {
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng());
  return v;
}

// The backend, with the row count in device memory, permuted poisoned first.
std::vector<unsigned char> backend_permute(const PermuteCall& c, const std::vector<unsigned char>& hidden) {
  Offset in(hidden.size(), c.in_offset), out(static_cast<std::size_t>(c.max_rows) * c.row_bytes(), c.out_offset);
  in.put(hidden);
  out.put(std::vector<unsigned char>(out.bytes, kPoisonByte));
  auto sorted = to_device(c.sorted.empty() ? std::vector<std::int32_t>{0} : c.sorted);
  auto post = to_device(std::vector<std::int32_t>{c.post_pad});
  moe::permute(in.data(), c.dtype, c.tokens, c.hidden_size, c.topk, sorted.data(), post.data(), c.max_rows,
               out.data());
  moe::synchronize();
  return out.get();
}

std::vector<unsigned char> reference_permute(const PermuteCall& c, const std::vector<unsigned char>& hidden) {
  std::vector<unsigned char> out(static_cast<std::size_t>(c.max_rows) * c.row_bytes(), kPoisonByte);
  moe::reference::permute(hidden.data(), c.dtype, c.tokens, c.hidden_size, c.topk, c.sorted.data(), &c.post_pad,
                          c.max_rows, out.data());
  return out;
}

// The contract, stated directly: rows below min(max(post_pad, 0), max_rows) copied or zero, the rest untouched.
std::vector<unsigned char> expected_permute(const PermuteCall& c, const std::vector<unsigned char>& hidden) {
  const std::size_t rb = c.row_bytes();
  std::vector<unsigned char> out(static_cast<std::size_t>(c.max_rows) * rb, kPoisonByte);
  const std::int64_t rows = std::min<std::int64_t>(std::max(c.post_pad, 0), c.max_rows);
  const std::int64_t numel = c.tokens * c.topk;
  for (std::int64_t p = 0; p < rows; ++p) {
    const std::int64_t id = c.sorted[static_cast<std::size_t>(p)];
    for (std::size_t b = 0; b < rb; ++b)
      out[static_cast<std::size_t>(p) * rb + b] =
          (id >= 0 && id < numel) ? hidden[static_cast<std::size_t>(id / c.topk) * rb + b] : 0;
  }
  return out;
}

std::string describe(const PermuteCall& c) {
  return "dtype=" + std::to_string(static_cast<int>(c.dtype)) + " tokens=" + std::to_string(c.tokens) +
         " hidden=" + std::to_string(c.hidden_size) + " topk=" + std::to_string(c.topk) +
         " max_rows=" + std::to_string(c.max_rows) + " post_pad=" + std::to_string(c.post_pad) +
         " offsets=" + std::to_string(c.in_offset) + "/" + std::to_string(c.out_offset);
}

void check_permute(const PermuteCall& c, const std::vector<unsigned char>& hidden) {
  INFO(describe(c));
  const auto want = expected_permute(c, hidden);
  const auto ref = reference_permute(c, hidden);
  REQUIRE_MESSAGE(ref == want, "reference vs the contract");
  const auto got = backend_permute(c, hidden);
  if (got != ref) {
    const auto at = static_cast<std::size_t>(std::mismatch(got.begin(), got.end(), ref.begin()).first - got.begin());
    const std::string m = std::string(moe::backend_name()) + " differs from the reference at byte " +
                          std::to_string(at) + " (row " + std::to_string(at / std::max<std::size_t>(c.row_bytes(), 1)) +
                          "): " + std::to_string(got[at]) + " vs " + std::to_string(ref[at]);
    FAIL(m);
  }
}

}  // namespace

TEST_CASE("permute golden: the contract's example, through a backend align (row count on the device)") {
  // 3 tokens a, b, c (hidden 4, bf16), topk 2, ids [[0,1],[1,2],[0,2]], 3 experts
  const std::vector<std::int32_t> ids{0, 1, 1, 2, 0, 2};
  std::vector<bfloat16_t> hidden;
  for (float v : {1.f, 2.f, 3.f, 4.f, 10.f, 20.f, 30.f, 40.f, -1.f, -2.f, -3.f, -4.f})
    hidden.push_back(from_float<bfloat16_t>(v));
  const std::vector<float> a{1, 2, 3, 4}, b{10, 20, 30, 40}, c{-1, -2, -3, -4}, z{0, 0, 0, 0};
  struct Want {
    std::int32_t block;
    std::vector<std::vector<float>> rows;
  };
  const Want wants[] = {{2, {a, c, a, b, b, c}}, {4, {a, c, z, z, a, b, z, z, b, c, z, z}}};
  for (const Want& w : wants) {
    INFO("block_size=" << w.block);
    const std::int64_t cap = moe::align_max_padded(6, 3, w.block);
    const auto layout = backend_align(ids, 3, w.block);  // on the backend: post_pad stays in device memory below
    auto d_ids = to_device(ids);
    moe::device_buffer<std::int32_t> sorted(static_cast<std::size_t>(cap)), experts(static_cast<std::size_t>(
        moe::align_max_blocks(6, 3, w.block))), post(1);
    moe::device_buffer<unsigned char> ws(moe::align_workspace_size(6, 3, w.block));
    moe::align_block_size(d_ids.data(), 6, 3, w.block, sorted.data(), experts.data(), post.data(), ws.data(),
                          ws.size());
    auto d_hidden = to_device(hidden);
    std::vector<bfloat16_t> poison(static_cast<std::size_t>(cap) * 4, bfloat16_t{0x5A5A});
    auto d_out = to_device(poison);
    moe::permute(d_hidden.data(), 3, 4, 2, sorted.data(), post.data(), cap, d_out.data());
    moe::synchronize();
    const auto got = to_host(d_out);
    REQUIRE(layout.num_tokens_post_pad == static_cast<std::int32_t>(w.rows.size()));
    for (std::size_t p = 0; p < w.rows.size(); ++p)
      for (std::size_t h = 0; h < 4; ++h) {
        CHECK_MESSAGE(bits(got[p * 4 + h]) == bits(from_float<bfloat16_t>(w.rows[p][h])), "row " << p << " col " << h);
      }
    for (std::size_t i = w.rows.size() * 4; i < got.size(); ++i) CHECK(got[i].bits == 0x5A5A);  // not written
    // padding rows are +0 bytes, not -0
    if (w.block == 4) CHECK(got[2 * 4].bits == 0);
  }
}

TEST_CASE("permute: the row count is min(max(*num_tokens_post_pad, 0), max_rows); odd ids are padding") {
  Rng rng(31);
  PermuteCall c;
  c.dtype = MOE_BFLOAT16;
  c.tokens = 5;
  c.topk = 2;
  c.hidden_size = 24;  // 48-byte rows: 16-byte words
  c.max_rows = 10;     // == numel: the smallest accepted
  const auto hidden = random_bytes(static_cast<std::size_t>(c.tokens) * c.row_bytes(), rng);
  // ids: in range, == numel (the sentinel), above it, negative, INT32 extremes
  c.sorted = {9, 0, 10, 3, -1, 11, 2147483647, -2147483647 - 1, 4, 8, 1, 1, 1, 1};
  for (std::int32_t post : {0, 1, 3, 9, 10, 11, 14, -1, -2147483647 - 1, 2147483647}) {
    c.post_pad = post;
    if (post > 14) c.sorted.resize(static_cast<std::size_t>(c.max_rows));  // only min(post, max_rows) are read
    check_permute(c, hidden);
  }
  // max_rows larger than the rows written: the rest stays poisoned (checked against the poison above)
  c.max_rows = 40;
  c.sorted.assign(40, 0);
  for (std::size_t i = 0; i < c.sorted.size(); ++i) c.sorted[i] = static_cast<std::int32_t>(rng() % 14) - 2;
  for (std::int32_t post : {17, 40, 41, 1000}) {
    c.post_pad = post;
    check_permute(c, hidden);
  }
  // num_tokens == 0 with rows to write: every id is padding, hidden is never read (may be NULL)
  PermuteCall e;
  e.dtype = MOE_FLOAT32;
  e.tokens = 0;
  e.topk = 4;
  e.hidden_size = 5;
  e.max_rows = 8;
  e.sorted = {0, 0, 1, 2, 3, 4, 5, 6};
  e.post_pad = 6;
  check_permute(e, {});
  moe::device_buffer<float> out(8 * 5);
  auto sorted = to_device(e.sorted);
  auto post = to_device(std::vector<std::int32_t>{6});
  CHECK(moe_permute(nullptr, MOE_FLOAT32, 0, 5, 4, sorted.data(), post.data(), 8, out.data(), nullptr) == MOE_SUCCESS);
}

TEST_CASE("permute: fp8 rows are bytes, every one of the 256 values kept (NaN patterns too)") {
  for (moe_dtype_t dtype : {MOE_FLOAT8_E4M3, MOE_FLOAT8_E5M2}) {
    PermuteCall c;
    c.dtype = dtype;
    c.tokens = 4;
    c.topk = 3;
    c.hidden_size = 256;
    std::vector<unsigned char> hidden(4 * 256);
    for (std::size_t i = 0; i < hidden.size(); ++i) hidden[i] = static_cast<unsigned char>(i * 7 + i / 256);
    Rng rng(32);
    const Layout l = host_layout(route(4, 3, 8, rng, 0.2), 8, 4);
    c.sorted = l.sorted;
    c.post_pad = l.post_pad;
    c.max_rows = l.max_padded;
    check_permute(c, hidden);
    // the typed C++ form
    std::vector<moe::float8_e4m3_t> typed(hidden.size());
    std::memcpy(typed.data(), hidden.data(), hidden.size());
    auto d_in = to_device(typed);
    moe::device_buffer<moe::float8_e4m3_t> d_out(static_cast<std::size_t>(c.max_rows) * 256);
    auto d_sorted = to_device(c.sorted);
    auto d_post = to_device(std::vector<std::int32_t>{c.post_pad});
    moe::permute(d_in.data(), 4, 256, 3, d_sorted.data(), d_post.data(), c.max_rows, d_out.data());
    moe::synchronize();
    const auto got = to_host(d_out);
    const auto want = expected_permute(c, hidden);
    CHECK(std::memcmp(got.data(), want.data(), static_cast<std::size_t>(c.post_pad) * 256) == 0);
  }
}

TEST_CASE("permute: random sweep, every dtype, sizes and alignments, against the reference") {
  Rng rng(33);
  std::uniform_int_distribution<std::int64_t> hidden_dist(1, 7168);
  const std::int64_t token_counts[] = {1, 2, 3, 7, 64, 333, 1000, 5000};
  for (moe_dtype_t dtype : kAllDtypes) {
    for (int rep = 0; rep < 6; ++rep) {
      PermuteCall c;
      c.dtype = dtype;
      c.tokens = token_counts[rng() % 8];
      c.topk = static_cast<std::int32_t>(1 + rng() % 8);
      // hidden: odd sizes, multiples of 16 bytes, the model sizes; bytes per case kept modest
      const std::int64_t picks[] = {hidden_dist(rng), 2048, 7168, 1, 3, 8, 4095, 96};
      c.hidden_size = picks[rng() % 8];
      while (c.tokens * c.topk * c.hidden_size * static_cast<std::int64_t>(c.esize()) > (24 << 20)) c.hidden_size /= 4;
      c.hidden_size = std::max<std::int64_t>(c.hidden_size, 1);
      const std::int32_t experts[] = {1, 4, 64, 256};
      const std::int32_t blocks[] = {1, 16, 64};
      const std::int32_t E = experts[rng() % 4], bs = blocks[rng() % 3];
      const Layout l = host_layout(route(c.tokens, c.topk, E, rng, rep % 3 == 0 ? 0.3 : 0.0), E, bs);
      c.sorted = l.sorted;
      c.post_pad = l.post_pad;
      c.max_rows = l.max_padded + (rep % 2 ? 0 : static_cast<std::int64_t>(rng() % 40));
      c.sorted.resize(static_cast<std::size_t>(c.max_rows), static_cast<std::int32_t>(c.tokens * c.topk));
      const std::size_t offsets[] = {0, 0, 1, 2, 4, 8, 3, 12};
      c.in_offset = offsets[rng() % 8];
      c.out_offset = offsets[rng() % 8];
      check_permute(c, random_bytes(static_cast<std::size_t>(c.tokens) * c.row_bytes(), rng));
    }
  }
}

TEST_CASE("permute: large rows and many tokens, every word width of the GPU kernel") {
  Rng rng(34);
  // 16384 tokens x topk 8: 147200 rows of capacity, ~139000 written
  PermuteCall c;
  c.dtype = MOE_BFLOAT16;
  c.tokens = 16384;
  c.topk = 8;
  c.hidden_size = 64;
  const Layout l = host_layout(route(c.tokens, c.topk, 256, rng), 256, 64);
  c.sorted = l.sorted;
  c.post_pad = l.post_pad;
  c.max_rows = l.max_padded;
  check_permute(c, random_bytes(static_cast<std::size_t>(c.tokens) * c.row_bytes(), rng));
  // 7168-wide rows at each alignment: 16, 8, 4, 2, 1-byte words
  PermuteCall w;
  w.tokens = 33;
  w.topk = 8;
  w.hidden_size = 7168;
  const Layout lw = host_layout(route(w.tokens, w.topk, 64, rng, 0.1), 64, 16);
  w.sorted = lw.sorted;
  w.post_pad = lw.post_pad;
  w.max_rows = lw.max_padded;
  for (moe_dtype_t dtype : {MOE_BFLOAT16, MOE_FLOAT8_E4M3}) {
    w.dtype = dtype;
    for (std::size_t off : {0, 8, 4, 2, 1}) {
      if (moe::dtype_size(dtype) > 1 && off % moe::dtype_size(dtype) != 0) continue;
      w.in_offset = off;
      w.out_offset = 16 - off % 16;
      check_permute(w, random_bytes(static_cast<std::size_t>(w.tokens) * w.row_bytes(), rng));
    }
  }
}

TEST_CASE("permute: empty calls are no-ops") {
  // max_rows == 0 (num_tokens == 0), hidden_size == 0: nothing read or written, NULLs accepted
  CHECK(moe_permute(nullptr, MOE_BFLOAT16, 0, 4096, 8, nullptr, nullptr, 0, nullptr, nullptr) == MOE_SUCCESS);
  CHECK(moe_permute(nullptr, MOE_FLOAT8_E5M2, 16, 0, 8, nullptr, nullptr, 1000, nullptr, nullptr) == MOE_SUCCESS);
}

// ---- errors --------------------------------------------------------------------------------------------------
TEST_CASE("errors: permute") {
  const std::int64_t T = 4, H = 8, R = 16;  // 4 tokens, topk 2: numel 8, capacity 16 rows
  moe::device_buffer<std::uint16_t> hidden(T * H), out(R * H);
  moe::device_buffer<std::int32_t> sorted(R), post(1);
  moe::device_buffer<unsigned char> scratch(4096);
  auto* x = hidden.data();
  auto* o = out.data();
  const std::int32_t* s = sorted.data();
  const std::int32_t* pp = post.data();
  const auto bf = MOE_BFLOAT16;
  const auto inval = MOE_ERROR_INVALID_ARGUMENT;
  CHECK_C_ERROR(moe_permute(x, bf, -1, H, 2, s, pp, R, o, nullptr), inval, "num_tokens");
  CHECK_C_ERROR(moe_permute(x, bf, T, -1, 2, s, pp, R, o, nullptr), inval, "hidden_size");
  CHECK_C_ERROR(moe_permute(x, bf, T, H, 0, s, pp, R, o, nullptr), inval, "topk");
  CHECK_C_ERROR(moe_permute(x, bf, T, H, -3, s, pp, R, o, nullptr), inval, "topk");
  CHECK_C_ERROR(moe_permute(x, bf, T, H, 2, s, pp, -1, o, nullptr), inval, "max_rows");
  CHECK_C_ERROR(moe_permute(x, bf, T, H, 2, s, pp, 7, o, nullptr), inval, "max_rows");  // < numel 8
  CHECK_C_ERROR(moe_permute(x, bf, std::int64_t{1} << 30, H, 2, s, pp, R, o, nullptr), inval, "2^31");
  CHECK_C_ERROR(moe_permute(x, bf, 1, std::int64_t{1} << 62, 1, s, pp, R, o, nullptr), inval, "overflows");
  CHECK_C_ERROR(moe_permute(x, bf, 1, std::int64_t{1} << 40, 1, s, pp, std::int64_t{1} << 30, o, nullptr), inval,
                      "overflows");
  CHECK_C_ERROR(moe_permute(nullptr, bf, T, H, 2, s, pp, R, o, nullptr), inval, "hidden");
  CHECK_C_ERROR(moe_permute(x, bf, T, H, 2, nullptr, pp, R, o, nullptr), inval, "sorted_token_ids");
  CHECK_C_ERROR(moe_permute(x, bf, T, H, 2, s, nullptr, R, o, nullptr), inval, "num_tokens_post_pad");
  CHECK_C_ERROR(moe_permute(x, bf, T, H, 2, s, pp, R, nullptr, nullptr), inval, "permuted");
  CHECK_C_ERROR(moe_permute(x, enum_from_int<moe_dtype_t>(10), T, H, 2, s, pp, R, o, nullptr), inval, "dtype");
  CHECK_C_ERROR(moe_permute(x, enum_from_int<moe_dtype_t>(-1), T, H, 2, s, pp, R, o, nullptr), inval, "dtype");
  // overlap: permuted over hidden, over the ids it reads, over the row count
  CHECK_C_ERROR(moe_permute(x, bf, T, H, 2, s, pp, R, x + 3, nullptr), inval, "overlaps hidden");
  CHECK_C_ERROR(moe_permute(o + R * H - 8, bf, 1, 8, 1, s, pp, 1, o + R * H - 12, nullptr), inval,
                      "overlaps hidden");
  auto* ws = scratch.data();
  CHECK_C_ERROR(moe_permute(x, bf, T, H, 2, reinterpret_cast<std::int32_t*>(ws + 64), pp, R, ws, nullptr),
                      inval, "overlaps sorted_token_ids");
  CHECK_C_ERROR(moe_permute(x, bf, T, H, 2, s, reinterpret_cast<std::int32_t*>(ws + 100), R, ws, nullptr), inval,
                      "overlaps num_tokens_post_pad");
  // adjacent but disjoint buffers are fine; every dtype is accepted (a copy of bytes)
  const std::vector<std::int32_t> ids(R, 0);
  moe::copy_to_device(sorted.data(), ids.data(), sorted.bytes());
  const std::int32_t zero = 0;
  moe::copy_to_device(post.data(), &zero, sizeof zero);
  for (moe_dtype_t t : kAllDtypes)
    CHECK(moe_permute(ws, t, 2, 8, 2, s, pp, 4, ws + 2 * 8 * moe::dtype_size(t), nullptr) == MOE_SUCCESS);
  // the C++ API throws moe::Error with the status
  try {
    moe::permute(x, bf, T, H, 2, s, pp, 3, o);
    FAIL("max_rows below numel accepted");
  } catch (const moe::Error& e) {
    CHECK(e.status() == inval);
    CHECK(std::string(e.what()).find("max_rows") != std::string::npos);
  }
}

TEST_CASE("errors: the fp8 dtypes are for moe_permute only") {
  moe::device_buffer<unsigned char> buf(4096);
  unsigned char* b = buf.data();
  for (moe_dtype_t t : {MOE_FLOAT8_E4M3, MOE_FLOAT8_E5M2}) {
    CHECK_C_ERROR(moe_sum(b, t, 2, 2, 8, b + 2048, nullptr), MOE_ERROR_UNSUPPORTED, "dtype");
    CHECK_C_ERROR(moe_combine(b, t, MOE_ROWS_FLAT, 2, 2, 8, nullptr, nullptr, 1.0f, b + 2048, nullptr),
                        MOE_ERROR_UNSUPPORTED, "dtype");
    std::int32_t* i = reinterpret_cast<std::int32_t*>(b);
    CHECK_C_ERROR(moe_align_block_size(b + 3072, t, 4, 4, 4, i, i + 64, i + 128, i + 200, 1024, nullptr),
                        MOE_ERROR_UNSUPPORTED, "id_type");
    CHECK(moe::dtype_size(t) == 1);
  }
}
