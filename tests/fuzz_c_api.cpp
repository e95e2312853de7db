// A random-argument fuzz of every C entry point: random and adversarial sizes, NULLs, pointers into one arena
// in the backend's memory (misaligned workspaces, overlapping buffers), enum values that name nothing. Every
// call must return exactly the status routing.h gives for its arguments (the expectation is computed here, from
// the contract, independently of the library); a call that succeeds must give the reference's results and
// write nothing outside its outputs and workspace. Run under ASan/UBSan (tools/sanitize.sh) it also shows that
// no call reads or writes out of bounds.
//   moe_fuzz_c_api [iterations (20000)] [seed (1)]   exit 0: all as documented; 1: a mismatch; 77: no backend
#include <algorithm>
#include <cinttypes>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "moe/reference.hpp"
#include "moe/routing.h"
#include "moe/routing.hpp"

namespace {

using Rng = std::mt19937_64;
constexpr std::size_t kArena = 64 * 1024;
constexpr std::int64_t kI32Max = std::numeric_limits<std::int32_t>::max();

std::uint64_t iteration = 0;
std::uint64_t outcomes[2][4] = {};  // [align, sum][status]: how often each status was the expectation
[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "fuzz_c_api: iteration %" PRIu64 ": %s (last error: '%s')\n", iteration, what.c_str(),
               moe_last_error());
  std::exit(1);
}
void expect(moe_status_t got, moe_status_t want, const std::string& call) {
  if (got != want)
    fail(call + " returned " + moe_status_string(got) + ", the contract says " + moe_status_string(want));
  if (got != MOE_SUCCESS && moe_last_error()[0] == '\0') fail(call + " failed with an empty moe_last_error()");
}

// ---- the contract, restated -------------------------------------------------------------------------------
bool known_dtype(int t) { return t >= MOE_INT8 && t <= MOE_FLOAT8_E5M2; }
bool value_dtype(int t) { return t >= MOE_FLOAT32 && t <= MOE_BFLOAT16; }  // moe_sum's
bool id_dtype(int t) { return t >= MOE_INT8 && t <= MOE_INT64; }
std::size_t dtype_bytes(int t) {
  switch (t) {
    case MOE_INT8: case MOE_UINT8: case MOE_FLOAT8_E4M3: case MOE_FLOAT8_E5M2: return 1;
    case MOE_INT16: case MOE_FLOAT16: case MOE_BFLOAT16: return 2;
    case MOE_INT32: case MOE_FLOAT32: return 4;
    case MOE_INT64: return 8;
    default: return 8;  // unknown: any alignment will do
  }
}
struct Shape {
  bool valid = false;
  std::int64_t max_padded = -1, max_blocks = -1;
};
Shape align_shape(std::int64_t numel, std::int32_t E, std::int32_t bs) {
  Shape s;
  if (numel < 0 || numel > kI32Max || E < 1 || E > 65536 || bs < 1) return s;
  const std::int64_t padded = numel + std::min<std::int64_t>(numel, E) * (bs - 1);
  if (padded > kI32Max) return s;
  s.valid = true;
  s.max_padded = padded;
  s.max_blocks = (padded + bs - 1) / bs;
  return s;
}
struct Region {
  std::size_t at, bytes;  // offset in the arena; bytes
  bool null;
};
bool overlap(const Region& a, const Region& b) {
  return !a.null && !b.null && a.bytes > 0 && b.bytes > 0 && a.at < b.at + b.bytes && b.at < a.at + a.bytes;
}

// ---- random arguments ---------------------------------------------------------------------------------------
template <class T>
T pick(Rng& rng, std::initializer_list<T> values) {
  return *(values.begin() + rng() % values.size());
}
std::int64_t rand_numel(Rng& rng) {
  switch (rng() % 10) {
    case 0: return pick<std::int64_t>(rng, {-1, INT64_MIN, kI32Max + 1, INT64_MAX, std::int64_t{1} << 40, kI32Max});
    case 1: return 0;
    case 2: case 3: return 1 + static_cast<std::int64_t>(rng() % 16);
    default: return static_cast<std::int64_t>(rng() % 1500);
  }
}
std::int32_t rand_experts(Rng& rng) {
  switch (rng() % 10) {
    case 0: return pick<std::int32_t>(rng, {0, -1, 65537, INT32_MIN, INT32_MAX, 65536, 4096});
    default: return 1 + static_cast<std::int32_t>(rng() % 64);
  }
}
std::int32_t rand_block(Rng& rng) {
  switch (rng() % 10) {
    case 0: return pick<std::int32_t>(rng, {0, -1, INT32_MIN, INT32_MAX, 1 << 20, 1 << 30});
    default: return 1 + static_cast<std::int32_t>(rng() % 64);
  }
}
int rand_dtype(Rng& rng, bool ids) {
  switch (rng() % 8) {
    case 0: return pick<int>(rng, {-1, 10, 99, INT32_MIN, INT32_MAX, 1 << 16});
    case 1: return static_cast<int>(rng() % 10);  // any known one, valid or not for the call
    default: return ids ? static_cast<int>(rng() % 5) : 5 + static_cast<int>(rng() % 3);
  }
}
// A place for `bytes` in the arena with `align`, or NULL: sometimes near a hot spot (overlaps likely), else
// anywhere. Where the buffer cannot fit, NULL: a caller never hands the library less memory than it declares.
Region place(Rng& rng, std::size_t bytes, std::size_t align, std::size_t hot) {
  if (rng() % 12 == 0 || bytes > kArena) return {0, bytes, true};
  const std::size_t room = kArena - bytes;
  std::size_t at = rng() % 3 == 0 ? std::min(room, hot + rng() % 512) : rng() % (room + 1);
  at -= at % align;
  return {at, bytes, false};
}

// ---- the arena and its host mirror --------------------------------------------------------------------------
struct Arena {
  unsigned char* device = nullptr;
  std::vector<unsigned char> mirror;  // what the device holds, as of the last check
  void* ptr(const Region& r) const { return r.null ? nullptr : device + r.at; }
  void randomize(Rng& rng) {
    for (auto& b : mirror) b = static_cast<unsigned char>(rng());
    if (moe_memcpy_to_device(device, mirror.data(), kArena) != MOE_SUCCESS) fail("arena upload");
  }
  // The arena after a call: bytes outside `writable` must not have changed. Returns the new contents.
  std::vector<unsigned char> after(std::initializer_list<Region> writable, const char* call) {
    if (moe_synchronize(nullptr) != MOE_SUCCESS) fail("moe_synchronize");
    std::vector<unsigned char> now(kArena);
    if (moe_memcpy_to_host(now.data(), device, kArena) != MOE_SUCCESS) fail("arena download");
    std::vector<Region> w;
    for (const Region& r : writable)
      if (!r.null && r.bytes > 0) w.push_back(r);
    std::sort(w.begin(), w.end(), [](const Region& a, const Region& b) { return a.at < b.at; });
    std::size_t from = 0;  // compare the gaps between the writable regions
    auto gap = [&](std::size_t to) {
      if (to > from && std::memcmp(now.data() + from, mirror.data() + from, to - from) != 0)
        for (std::size_t i = from; i < to; ++i)
          if (now[i] != mirror[i]) fail(std::string(call) + " wrote arena byte " + std::to_string(i) + ", outside its outputs");
    };
    for (const Region& r : w) {
      gap(r.at);
      from = std::max(from, r.at + r.bytes);
    }
    gap(kArena);
    return now;
  }
};

std::string args_text(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string args_text(const char* fmt, ...) {
  char text[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  return text;
}

// ---- the entry points -----------------------------------------------------------------------------------------
void fuzz_align(Rng& rng, Arena& arena) {
  const std::int64_t numel = rand_numel(rng);
  const std::int32_t E = rand_experts(rng), bs = rand_block(rng);
  const int dtype = rand_dtype(rng, true);
  const Shape s = align_shape(numel, E, bs);
  std::size_t required = 0;
  if (s.valid && moe_align_workspace_size(numel, E, bs, &required) != MOE_SUCCESS) fail("workspace size of a valid shape");
  const std::size_t esize = dtype_bytes(dtype);
  const std::size_t hot = rng() % kArena;
  const auto n = s.valid ? static_cast<std::size_t>(numel) : 0;
  Region ids = place(rng, n * esize, esize, hot);
  Region sorted = place(rng, s.valid ? static_cast<std::size_t>(s.max_padded) * 4 : 0, 4, hot);
  Region experts = place(rng, s.valid ? static_cast<std::size_t>(s.max_blocks) * 4 : 0, 4, hot);
  Region post = place(rng, 4, 4, hot);
  std::size_t ws_bytes = required;
  switch (rng() % 6) {
    case 0: ws_bytes = required > 0 ? rng() % required : 0; break;  // too small (or 0)
    case 1: ws_bytes = required + rng() % 1024; break;
    case 2: ws_bytes = 0; break;
    default: break;
  }
  Region ws = place(rng, ws_bytes, rng() % 4 == 0 ? 1 : MOE_WORKSPACE_ALIGNMENT, hot);
  if (!s.valid && rng() % 2 == 0) ids = sorted = experts = post = ws = {rng() % kArena, 0, false};  // junk pointers
  // ids of the dtype, some out of range (dropped)
  if (s.valid && !ids.null && id_dtype(dtype)) {
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t v = rng() % 10 == 0 ? -1 : static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(E + 1));
      unsigned char* p = arena.mirror.data() + ids.at + i * esize;
      switch (dtype) {
        case MOE_INT8: { const auto x = static_cast<std::int8_t>(std::max<std::int64_t>(-128, std::min<std::int64_t>(v, 127))); std::memcpy(p, &x, 1); break; }
        case MOE_UINT8: { const auto x = static_cast<std::uint8_t>(std::max<std::int64_t>(0, std::min<std::int64_t>(v, 255))); std::memcpy(p, &x, 1); break; }
        case MOE_INT16: { const auto x = static_cast<std::int16_t>(std::min<std::int64_t>(v, 32767)); std::memcpy(p, &x, 2); break; }
        case MOE_INT32: { const auto x = static_cast<std::int32_t>(v); std::memcpy(p, &x, 4); break; }
        default: { std::memcpy(p, &v, 8); break; }
      }
    }
    if (moe_memcpy_to_device(arena.ptr(ids), arena.mirror.data() + ids.at, ids.bytes) != MOE_SUCCESS) fail("ids upload");
  }

  moe_status_t want = MOE_SUCCESS;
  if (!s.valid || !known_dtype(dtype)) want = MOE_ERROR_INVALID_ARGUMENT;
  else if (!id_dtype(dtype)) want = MOE_ERROR_UNSUPPORTED;
  else if (post.null || (numel > 0 && (ids.null || sorted.null || experts.null))) want = MOE_ERROR_INVALID_ARGUMENT;
  else if (ws_bytes < required || (required > 0 && ws.null)) want = MOE_ERROR_INVALID_ARGUMENT;
  else if (!ws.null && reinterpret_cast<std::uintptr_t>(arena.device + ws.at) % MOE_WORKSPACE_ALIGNMENT != 0)
    want = MOE_ERROR_INVALID_ARGUMENT;
  else {
    const Region all[] = {ids, sorted, experts, post, {ws.at, ws_bytes, ws.null}};
    for (int a = 0; a < 5; ++a)
      for (int b = a + 1; b < 5; ++b)
        if (overlap(all[a], all[b])) want = MOE_ERROR_INVALID_ARGUMENT;
  }
  const std::string call = args_text("moe_align_block_size(dtype %d, numel %" PRId64 ", experts %d, block %d, ws %zu of %zu)",
                                     dtype, numel, E, bs, ws_bytes, required);
  const moe_status_t got = moe_align_block_size(arena.ptr(ids), static_cast<moe_dtype_t>(dtype), numel, E, bs,
                                                static_cast<std::int32_t*>(arena.ptr(sorted)),
                                                static_cast<std::int32_t*>(arena.ptr(experts)),
                                                static_cast<std::int32_t*>(arena.ptr(post)), arena.ptr(ws), ws_bytes,
                                                nullptr);
  expect(got, want, call);
  ++outcomes[0][want];
  std::vector<unsigned char> now = arena.after({sorted, experts, post, ws}, call.c_str());
  if (got == MOE_SUCCESS) {
    std::vector<std::int32_t> rs(static_cast<std::size_t>(s.max_padded)), re(static_cast<std::size_t>(s.max_blocks));
    std::int32_t rp = -1;
    std::vector<std::int32_t> rws(static_cast<std::size_t>(E));
    std::vector<unsigned char> host_ids(arena.mirror.begin() + static_cast<std::ptrdiff_t>(ids.at),
                                        arena.mirror.begin() + static_cast<std::ptrdiff_t>(ids.at + ids.bytes));
    host_ids.resize(std::max<std::size_t>(host_ids.size(), 8));  // aligned storage for the reference
    std::vector<std::int64_t> aligned_ids((host_ids.size() + 7) / 8);
    std::memcpy(aligned_ids.data(), host_ids.data(), host_ids.size());
    moe::reference::align_block_size(aligned_ids.data(), static_cast<moe_dtype_t>(dtype), numel, E, bs, rs.data(),
                                     re.data(), &rp, rws.data(), rws.size() * 4);
    auto same = [&](const Region& r, const void* expected) {  // numel 0: empty outputs (and NULL vectors)
      return r.bytes == 0 || std::memcmp(now.data() + r.at, expected, r.bytes) == 0;
    };
    if (!same(sorted, rs.data())) fail(call + ": sorted_token_ids differ from the reference");
    if (!same(experts, re.data())) fail(call + ": expert_ids differ from the reference");
    if (!same(post, &rp)) fail(call + ": num_tokens_post_pad differs from the reference");
  }
  arena.mirror = std::move(now);
}

void fuzz_sum(Rng& rng, Arena& arena) {
  const int dtype = rand_dtype(rng, false);
  std::int64_t tokens = static_cast<std::int64_t>(rng() % 17), hidden = static_cast<std::int64_t>(rng() % 70);
  std::int32_t topk = 1 + static_cast<std::int32_t>(rng() % 8);
  switch (rng() % 10) {
    case 0: tokens = pick<std::int64_t>(rng, {-1, INT64_MIN, INT64_MAX, std::int64_t{1} << 40}); break;
    case 1: topk = pick<std::int32_t>(rng, {0, -1, INT32_MIN, INT32_MAX}); break;
    case 2: hidden = pick<std::int64_t>(rng, {-1, INT64_MIN, INT64_MAX, std::int64_t{1} << 40}); break;
    default: break;
  }
  const std::size_t esize = dtype_bytes(dtype);
  const std::int64_t max = INT64_MAX / 8;
  bool shape_ok = tokens >= 0 && topk >= 1 && hidden >= 0;
  const bool overflows = shape_ok && hidden > 0 && (tokens > max / hidden || tokens * hidden > max / topk);
  const std::int64_t out_elems = shape_ok && !overflows ? tokens * hidden : 0;
  const bool fits = out_elems > 0 && static_cast<std::uint64_t>(out_elems) * topk * esize <= kArena;
  const std::size_t hot = rng() % kArena;
  Region in = place(rng, fits ? static_cast<std::size_t>(out_elems) * topk * esize : 0, esize, hot);
  Region out = place(rng, fits ? static_cast<std::size_t>(out_elems) * esize : 0, esize, hot);
  if (!fits && out_elems > 0) in.null = out.null = true;  // a shape too large for the arena: only NULLs
  if (!in.null && fits)
    if (moe_memcpy_to_device(arena.ptr(in), arena.mirror.data() + in.at, in.bytes) != MOE_SUCCESS) fail("input upload");

  moe_status_t want = MOE_SUCCESS;
  if (!known_dtype(dtype)) want = MOE_ERROR_INVALID_ARGUMENT;
  else if (!value_dtype(dtype)) want = MOE_ERROR_UNSUPPORTED;
  else if (!shape_ok || overflows) want = MOE_ERROR_INVALID_ARGUMENT;
  else if (out_elems == 0) want = MOE_SUCCESS;
  else if (in.null || out.null || overlap(in, out)) want = MOE_ERROR_INVALID_ARGUMENT;
  const std::string call = args_text("moe_sum(dtype %d, tokens %" PRId64 ", topk %d, hidden %" PRId64 ")", dtype,
                                     tokens, topk, hidden);
  const moe_status_t got = moe_sum(arena.ptr(in), static_cast<moe_dtype_t>(dtype), tokens, topk, hidden,
                                   arena.ptr(out), nullptr);
  expect(got, want, call);
  ++outcomes[1][want];
  std::vector<unsigned char> now = arena.after({out}, call.c_str());
  if (got == MOE_SUCCESS && out_elems > 0) {
    std::vector<std::uint32_t> x((in.bytes + 3) / 4), y((out.bytes + 3) / 4);  // aligned host copies
    std::memcpy(x.data(), arena.mirror.data() + in.at, in.bytes);
    moe::reference::sum(x.data(), static_cast<moe_dtype_t>(dtype), tokens, topk, hidden, y.data());
    if (std::memcmp(now.data() + out.at, y.data(), out.bytes) != 0) fail(call + ": output differs from the reference");
  }
  arena.mirror = std::move(now);
}

void fuzz_queries(Rng& rng) {
  const std::int64_t numel = rand_numel(rng);
  const std::int32_t E = rand_experts(rng), bs = rand_block(rng);
  const Shape s = align_shape(numel, E, bs);
  const std::string call = args_text("(numel %" PRId64 ", experts %d, block %d)", numel, E, bs);
  if (moe_align_max_padded(numel, E, bs) != s.max_padded) fail("moe_align_max_padded" + call);
  if (moe_align_max_blocks(numel, E, bs) != s.max_blocks) fail("moe_align_max_blocks" + call);
  std::size_t bytes = 77;
  expect(moe_align_workspace_size(numel, E, bs, &bytes), s.valid ? MOE_SUCCESS : MOE_ERROR_INVALID_ARGUMENT,
         "moe_align_workspace_size" + call);
  if (!s.valid && bytes != 77) fail("moe_align_workspace_size wrote *bytes on failure");
  if (s.valid && numel == 0 && bytes != 0) fail("moe_align_workspace_size: numel 0 needs a workspace");
  expect(moe_align_workspace_size(numel, E, bs, nullptr), MOE_ERROR_INVALID_ARGUMENT, "moe_align_workspace_size(NULL)");
}

void fuzz_memory(Rng& rng, Arena& arena) {
  switch (rng() % 4) {
    case 0: {  // moe_malloc / moe_free
      std::size_t bytes = rng() % 5000;
      if (rng() % 16 == 0)  // (a refused huge size prints a warning under ASan: not too many)
        bytes = pick<std::size_t>(rng, {0, SIZE_MAX, SIZE_MAX - 3, SIZE_MAX - 255,
                                        static_cast<std::size_t>(PTRDIFF_MAX) + 1, static_cast<std::size_t>(PTRDIFF_MAX),
                                        std::size_t{1} << 62, std::size_t{1} << 50});
      void* p = reinterpret_cast<void*>(0x40);
      const moe_status_t st = moe_malloc(&p, bytes);
      const std::string call = "moe_malloc(" + std::to_string(bytes) + ")";
      if (bytes > static_cast<std::size_t>(PTRDIFF_MAX)) expect(st, MOE_ERROR_INVALID_ARGUMENT, call);
      else if (bytes <= 5000) expect(st, MOE_SUCCESS, call);
      else if (st != MOE_SUCCESS && st != MOE_ERROR_BACKEND) fail(call + ": neither success nor out of memory");
      if (st != MOE_SUCCESS && p != nullptr) fail(call + " failed but left the pointer set");
      if (st == MOE_SUCCESS && bytes == 0 && p != nullptr) fail("moe_malloc(0) gave a pointer");
      if (p != nullptr && reinterpret_cast<std::uintptr_t>(p) % MOE_WORKSPACE_ALIGNMENT != 0) fail(call + ": misaligned");
      if (p != nullptr && bytes > 0 && bytes <= 5000) {  // the whole block is usable
        std::vector<unsigned char> fill(bytes, 0xA5), back(bytes);
        expect(moe_memcpy_to_device(p, fill.data(), bytes), MOE_SUCCESS, "memcpy into a new block");
        expect(moe_memcpy_to_host(back.data(), p, bytes), MOE_SUCCESS, "memcpy from a new block");
        if (back != fill) fail("a new block does not hold what was written");
      }
      expect(moe_free(p), MOE_SUCCESS, "moe_free");
      expect(moe_malloc(nullptr, bytes), MOE_ERROR_INVALID_ARGUMENT, "moe_malloc(NULL, ...)");
      break;
    }
    case 1: {  // copies into and out of the arena
      const std::size_t at = rng() % kArena, bytes = rng() % (kArena - at + 1);
      std::vector<unsigned char> host(bytes);
      for (auto& b : host) b = static_cast<unsigned char>(rng());
      const bool null_dst = rng() % 8 == 0, null_src = rng() % 8 == 0;
      const moe_status_t want = bytes > 0 && (null_dst || null_src) ? MOE_ERROR_INVALID_ARGUMENT : MOE_SUCCESS;
      expect(moe_memcpy_to_device(null_dst ? nullptr : arena.device + at, null_src ? nullptr : host.data(), bytes), want,
             "moe_memcpy_to_device");
      if (want == MOE_SUCCESS) std::copy(host.begin(), host.end(), arena.mirror.begin() + static_cast<std::ptrdiff_t>(at));
      std::vector<unsigned char> back(bytes);
      expect(moe_memcpy_to_host(null_dst ? nullptr : back.data(), null_src ? nullptr : arena.device + at, bytes), want,
             "moe_memcpy_to_host");
      if (want == MOE_SUCCESS &&
          !std::equal(back.begin(), back.end(), arena.mirror.begin() + static_cast<std::ptrdiff_t>(at)))
        fail("moe_memcpy_to_host gave other bytes than the arena holds");
      break;
    }
    case 2: {  // the small calls
      const int v = rand_dtype(rng, rng() % 2 == 0);
      const std::string text = moe_status_string(static_cast<moe_status_t>(v));
      if ((v >= 0 && v <= 3) == (text == "unknown status")) fail("moe_status_string(" + std::to_string(v) + ")");
      if (std::strlen(moe_backend_name()) == 0) fail("moe_backend_name");
      expect(moe_backend_check(), MOE_SUCCESS, "moe_backend_check");
      expect(moe_synchronize(nullptr), MOE_SUCCESS, "moe_synchronize(NULL)");
      (void)moe_last_error();
      break;
    }
    default: arena.randomize(rng); break;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::uint64_t iterations = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 20000;
  const std::uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1;
  if (moe_backend_check() != MOE_SUCCESS) {
    std::printf("SKIPPED: %s\n", moe_last_error());
    return 77;
  }
  Rng rng(seed);
  Arena arena;
  void* device = nullptr;
  if (moe_malloc(&device, kArena) != MOE_SUCCESS) fail("arena allocation");
  arena.device = static_cast<unsigned char*>(device);
  arena.mirror.assign(kArena, 0);
  arena.randomize(rng);
  std::uint64_t calls[4] = {};
  for (iteration = 0; iteration < iterations; ++iteration) {
    const unsigned what = static_cast<unsigned>(rng() % 10);
    if (what < 5) fuzz_align(rng, arena), ++calls[0];
    else if (what < 7) fuzz_sum(rng, arena), ++calls[1];
    else if (what < 8) fuzz_queries(rng), ++calls[2];
    else fuzz_memory(rng, arena), ++calls[3];
  }
  if (moe_free(device) != MOE_SUCCESS) fail("arena free");
  std::printf("fuzz_c_api on %s: %" PRIu64 " iterations (seed %" PRIu64 "): %" PRIu64 " align, %" PRIu64
              " sum, %" PRIu64 " size queries, %" PRIu64 " memory calls, every status as documented\n",
              moe_backend_name(), iterations, seed, calls[0], calls[1], calls[2], calls[3]);
  for (int op = 0; op < 2; ++op)
    std::printf("  %s: %" PRIu64 " succeeded (results checked), %" PRIu64 " invalid argument, %" PRIu64 " unsupported\n",
                op == 0 ? "align" : "sum", outcomes[op][0], outcomes[op][1], outcomes[op][2]);
  return 0;
}
