// Bindings of expert parallelism (moe/ep.h, through its C++ mirror moe/ep.hpp): the communicator, the handle and
// its collective calls, on DLPack arrays in the backend's memory. Semantics: ep.h; the Python layer is
// python/moe_routing/ep.py. Compiled when core/include/moe/ep.h exists (python/CMakeLists.txt).
//
// Every call that is collective in ep.h stays collective when this binding refuses an argument: a rank whose
// arrays fail a check here still enters the library's call, with an argument the library refuses (num_tokens
// -1, recv_rows -1, NULL buffers, hidden 0), so that every rank leaves the call together with an error (MPI: the
// library agrees on local argument errors; the other ranks' text names this rank), and this rank raises the text
// of its own check. The one exception is a combine on a rank with nothing to read or write (no tokens, no slots):
// the library accepts the NULL buffers there, so the other ranks complete the call and only this rank raises.
#include "common.hpp"

#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <utility>
#include <vector>

#include "moe/ep.hpp"

namespace moe_py {

namespace {

// A library call with the GIL released (collective calls block on the other ranks); moe::Error becomes the
// package's exception (the GIL is held again when the handler runs: the release's scope is the try block).
template <class F>
auto ep_call(F&& f) -> decltype(f()) {
  try {
    nb::gil_scoped_release nogil;
    return f();
  } catch (const moe::Error& e) {
    raise(e.status(), e.what());
  } catch (const std::bad_alloc&) {
    raise(MOE_ERROR_BACKEND, "out of host memory");
  }
}

// The checks of one call; on any failure, `fail` runs the library's call with a refused argument (every rank
// then leaves it with an error) and this rank's exception propagates.
template <class Checks, class Fail>
void checked(Checks&& checks, Fail&& fail) {
  try {
    checks();
  } catch (...) {
    fail();
    throw;
  }
}

template <class F>
void swallow(F&& f) {
  try {
    nb::gil_scoped_release nogil;
    f();
  } catch (...) {
  }
}

constexpr int kFloat8E4M3 = 8, kFloat8E5M2 = 9;  // ep.h takes these routing.h values as 1-byte types

int elem_bytes(int moe_t) {
  if (moe_t == kFloat8E4M3 || moe_t == kFloat8E5M2) return 1;
  return static_cast<int>(moe::dtype_size(static_cast<moe_dtype_t>(moe_t)));
}

const char* moe_dtype_text(int t) {
  switch (t) {
    case MOE_INT8: return "int8";
    case MOE_UINT8: return "uint8";
    case MOE_INT16: return "int16";
    case MOE_INT32: return "int32";
    case MOE_INT64: return "int64";
    case MOE_FLOAT32: return "float32";
    case MOE_FLOAT16: return "float16";
    case MOE_BFLOAT16: return "bfloat16";
    case kFloat8E4M3: return "float8_e4m3";
    case kFloat8E5M2: return "float8_e5m2";
    default: return "an unknown dtype";
  }
}

// Whether array a holds elements of the handle's dtype moe_t: that dtype, or, for the types NumPy lacks
// (bfloat16, fp8), an integer dtype of the same size holding the bits.
bool holds(const Array& a, int moe_t) {
  if (moe_dtype_of(a.dtype()) == moe_t) return true;
  const bool bits_only = moe_t == MOE_BFLOAT16 || moe_t == kFloat8E4M3 || moe_t == kFloat8E5M2;
  using c = nb::dlpack::dtype_code;
  const auto code = static_cast<c>(a.dtype().code);
  return bits_only && (code == c::Int || code == c::UInt) && a.dtype().lanes == 1 &&
         a.dtype().bits == 8 * elem_bytes(moe_t);
}

void require_holds(const Array& a, int moe_t, const char* which) {
  if (holds(a, moe_t)) return;
  std::string want = moe_dtype_text(moe_t);
  if (moe_t == MOE_BFLOAT16) want += " (or uint16 / int16 holding its bits)";
  if (moe_t == kFloat8E4M3 || moe_t == kFloat8E5M2) want += " (or uint8 / int8 holding its bits)";
  raise_invalid(std::string(a.what) + " must be " + want + ", the handle's " + which + ", got " + dtype_name(a.dtype()));
}

std::string dims(std::int64_t a, std::int64_t b) { return "(" + std::to_string(a) + ", " + std::to_string(b) + ")"; }

// 2-D [rows, cols]: rows == exactly (when >= 0) or rows >= at_least.
void require_rows(const Array& a, std::int64_t exactly, std::int64_t at_least, std::int64_t cols, const char* names) {
  const bool ok = a.ndim() == 2 && a.shape(1) == cols && (exactly >= 0 ? a.shape(0) == exactly : a.shape(0) >= at_least);
  if (ok) return;
  const std::string want = exactly >= 0 ? dims(exactly, cols)
                                        : "(rows, " + std::to_string(cols) + ") with rows >= " + std::to_string(at_least);
  raise_invalid(std::string(a.what) + " must have shape " + want + " = " + names + ", got " + shape_str(a));
}

template <class T>
T* ptr(const Array& a) {
  return a.present ? static_cast<T*>(a.writable ? a.mutable_data() : const_cast<void*>(a.data())) : nullptr;
}

// ---- the communicator ---------------------------------------------------------------------------------------------
struct EpComm {
  moe::ep::Comm comm;
  std::string transport;
};

std::unique_ptr<EpComm> comm_mpi(std::uintptr_t mpi_comm_address, std::int32_t num_experts, std::uintptr_t expert_rank,
                                 std::uintptr_t expert_local) {
  return ep_call([&] {
    return std::make_unique<EpComm>(EpComm{
        moe::ep::Comm::mpi(reinterpret_cast<const void*>(mpi_comm_address), num_experts,
                           reinterpret_cast<const std::int32_t*>(expert_rank),
                           reinterpret_cast<const std::int32_t*>(expert_local)),
        "mpi"});
  });
}

std::unique_ptr<EpComm> comm_nccl(std::uintptr_t nccl_comm, std::int32_t num_experts, std::uintptr_t expert_rank,
                                  std::uintptr_t expert_local) {
  return ep_call([&] {
    return std::make_unique<EpComm>(EpComm{
        moe::ep::Comm::nccl(reinterpret_cast<void*>(nccl_comm), num_experts,
                            reinterpret_cast<const std::int32_t*>(expert_rank),
                            reinterpret_cast<const std::int32_t*>(expert_local)),
        "nccl"});
  });
}

// ---- the handle ---------------------------------------------------------------------------------------------------
struct EpHandle {
  std::unique_ptr<moe::ep::Handle> h;
  std::string transport;
};

moe::ep::Config make_config(std::int64_t max_tokens, std::int64_t hidden, int dispatch_dtype, int combine_dtype,
                            std::int32_t topk, std::int32_t scales_per_token, int mode, std::int64_t capacity,
                            std::int64_t slot_capacity, std::int64_t max_recv_rows, std::int64_t max_recv_slots) {
  moe::ep::Config c{};
  c.max_tokens = max_tokens;
  c.hidden = hidden;
  c.dispatch_dtype = static_cast<moe_dtype_t>(dispatch_dtype);
  c.combine_dtype = static_cast<moe_dtype_t>(combine_dtype);
  c.topk = topk;
  c.scales_per_token = scales_per_token;
  c.mode = static_cast<moe_ep_mode_t>(mode);
  c.capacity = capacity;
  c.slot_capacity = slot_capacity;
  c.max_recv_rows = max_recv_rows;
  c.max_recv_slots = max_recv_slots;
  return c;
}

std::unique_ptr<EpHandle> handle_create(const EpComm& comm, std::int64_t max_tokens, std::int64_t hidden,
                                        int dispatch_dtype, int combine_dtype, std::int32_t topk,
                                        std::int32_t scales_per_token, int mode, std::int64_t capacity,
                                        std::int64_t slot_capacity, std::int64_t max_recv_rows,
                                        std::int64_t max_recv_slots) {
  const auto cfg = make_config(max_tokens, hidden, dispatch_dtype, combine_dtype, topk, scales_per_token, mode,
                               capacity, slot_capacity, max_recv_rows, max_recv_slots);
  return ep_call([&] {
    return std::make_unique<EpHandle>(EpHandle{std::make_unique<moe::ep::Handle>(comm.comm, cfg), comm.transport});
  });
}

// A handle creation every rank leaves with an error: this rank's config was refused before it reached the library.
void handle_create_fail(const EpComm& comm) {
  swallow([&] {
    moe::ep::Config c{};
    c.hidden = 0;  // refused by the library, agreed on by every rank
    c.topk = 1;
    c.dispatch_dtype = MOE_FLOAT32;
    c.combine_dtype = MOE_FLOAT32;
    moe::ep::Handle h(comm.comm, c);
  });
}

void fail_call(EpHandle& self, const std::string& op) {
  moe::ep::Handle& h = *self.h;
  if (op == "dispatch_layout") swallow([&] { h.dispatch_layout(nullptr, -1); });
  else if (op == "dispatch") swallow([&] { h.dispatch(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, -1); });
  else if (op == "combine") swallow([&] { h.combine(nullptr, nullptr, nullptr, 1.0f, nullptr); });
}

nb::tuple dispatch_layout(EpHandle& self, nb::handle topk_ids, std::uintptr_t stream) {
  const moe::ep::Config& cfg = self.h->config();
  Array ids;
  checked([&] {
    ids = input(topk_ids, "topk_ids");
    require_dtype(ids, MOE_INT32, "int32");
    if (ids.ndim() != 2 || ids.shape(1) != cfg.topk)
      raise_invalid("topk_ids must have shape (num_tokens, " + std::to_string(cfg.topk) +
                    ") = (num_tokens, topk), got " + shape_str(ids));
  }, [&] { fail_call(self, "dispatch_layout"); });
  const std::int64_t T = ids.shape(0);
  const auto c = ep_call([&] { return self.h->dispatch_layout(static_cast<const std::int32_t*>(ids.data()), T, stream_ptr(stream)); });
  return nb::make_tuple(c.recv_rows, c.recv_slots);
}

// num_tokens: the last layout's, or -1 when the Python layer knows of none (the library then refuses the call).
void dispatch(EpHandle& self, nb::handle hidden, nb::handle scales, nb::handle topk_weights, nb::handle recv_hidden,
              nb::handle recv_scales, nb::handle recv_topk_ids, nb::handle recv_topk_weights, std::int64_t num_tokens,
              std::uintptr_t stream) {
  const moe::ep::Config& cfg = self.h->config();
  const std::int64_t T = num_tokens;
  Array h, s, w, rh, rs, ri, rw;
  std::int64_t rows = 0;
  checked([&] {
    h = input(hidden, "hidden");
    require_holds(h, cfg.dispatch_dtype, "dispatch_dtype");
    require_rows(h, T >= 0 ? T : -1, 0, cfg.hidden, "(num_tokens, hidden)");
    s = input(scales, "scales", true);
    if (cfg.scales_per_token > 0 && !s.present)
      raise_invalid("scales is None but the handle has scales_per_token = " + std::to_string(cfg.scales_per_token));
    if (cfg.scales_per_token == 0 && s.present) raise_invalid("scales given but the handle has scales_per_token = 0");
    if (s.present) {
      require_dtype(s, MOE_FLOAT32, "float32");
      require_rows(s, T >= 0 ? T : -1, 0, cfg.scales_per_token, "(num_tokens, scales_per_token)");
    }
    w = input(topk_weights, "topk_weights", true);
    if (w.present) {
      require_dtype(w, MOE_FLOAT32, "float32");
      require_rows(w, T >= 0 ? T : -1, 0, cfg.topk, "(num_tokens, topk)");
    }
    rh = output(recv_hidden, "recv_hidden");
    require_holds(rh, cfg.dispatch_dtype, "dispatch_dtype");
    require_rows(rh, -1, 0, cfg.hidden, "(recv_rows, hidden)");
    rows = rh.shape(0);
    rs = output(recv_scales, "recv_scales", true);
    if (cfg.scales_per_token > 0 && !rs.present)
      raise_invalid("recv_scales is None but the handle has scales_per_token = " + std::to_string(cfg.scales_per_token));
    if (cfg.scales_per_token == 0 && rs.present) raise_invalid("recv_scales given but the handle has scales_per_token = 0");
    if (rs.present) {
      require_dtype(rs, MOE_FLOAT32, "float32");
      require_rows(rs, -1, rows, cfg.scales_per_token, "(recv_rows, scales_per_token)");
    }
    ri = output(recv_topk_ids, "recv_topk_ids");
    require_dtype(ri, MOE_INT32, "int32");
    require_rows(ri, -1, rows, cfg.topk, "(recv_rows, topk)");
    rw = output(recv_topk_weights, "recv_topk_weights", true);
    if (rw.present) {
      require_dtype(rw, MOE_FLOAT32, "float32");
      require_rows(rw, -1, rows, cfg.topk, "(recv_rows, topk)");
    }
    for (const Array* a : {&s, &w, &rh, &rs, &ri, &rw})
      if (a->present) require_same_device(h, *a);
  }, [&] { fail_call(self, "dispatch"); });
  ep_call([&] {
    self.h->dispatch(h.data(), ptr<const float>(s), ptr<const float>(w), rh.mutable_data(), ptr<float>(rs),
                     ptr<std::int32_t>(ri), ptr<float>(rw), rows, stream_ptr(stream));
  });
}

// num_tokens, recv_rows: the last layout's (-1: none known; the library then refuses the call).
void combine(EpHandle& self, nb::handle expert_out, nb::handle token_positions, nb::handle topk_weights, float scale,
             nb::handle output_, std::int64_t num_tokens, std::int64_t recv_rows, std::uintptr_t stream) {
  const moe::ep::Config& cfg = self.h->config();
  const std::int64_t T = num_tokens, slots = recv_rows >= 0 ? recv_rows * cfg.topk : -1;
  Array x, pos, w, out;
  checked([&] {
    x = input(expert_out, "expert_out", true);
    pos = input(token_positions, "token_positions", true);
    if (pos.present) {
      require_dtype(pos, MOE_INT32, "int32");
      if (slots >= 0 && pos.size() != slots)
        raise_invalid("token_positions must have recv_rows * topk = " + std::to_string(slots) +
                      " elements (align_block_size_ep's token_positions of recv_topk_ids), got " + shape_str(pos));
    }
    if (x.present) {
      require_holds(x, cfg.combine_dtype, "combine_dtype");
      const bool flat3 = !pos.present && x.ndim() == 3 && x.shape(1) == cfg.topk;
      if (!flat3) require_rows(x, -1, pos.present || slots < 0 ? 0 : slots, cfg.hidden,
                               pos.present ? "(rows, hidden), rows past every token_positions entry"
                                           : "(recv_rows * topk, hidden) (or (recv_rows, topk, hidden))");
      else if (x.shape(2) != cfg.hidden || (slots >= 0 && x.shape(0) * cfg.topk < slots))
        raise_invalid("expert_out must have shape (recv_rows, topk, hidden) = (" + std::to_string(recv_rows) + ", " +
                      std::to_string(cfg.topk) + ", " + std::to_string(cfg.hidden) + "), got " + shape_str(x));
      if (pos.present) require_same_device(x, pos);
#if !defined(MOE_BACKEND_CUDA) && !defined(MOE_BACKEND_HIP)
      if (pos.present) {  // host memory: a position past expert_out's rows would be read out of bounds
        const auto* p = static_cast<const std::int32_t*>(pos.data());
        const std::int64_t n = pos.size(), max_rows = x.size() / cfg.hidden;
        for (std::int64_t i = 0; i < n; ++i)
          if (p[i] >= max_rows)
            raise_invalid("token_positions[" + std::to_string(i) + "] = " + std::to_string(p[i]) +
                          " is past expert_out's " + std::to_string(max_rows) + " rows");
      }
#endif
    } else if (slots > 0) {
      raise_invalid("expert_out is None but this rank received " + std::to_string(recv_rows) + " rows");
    }
    w = input(topk_weights, "topk_weights", true);
    if (w.present) {
      require_dtype(w, MOE_FLOAT32, "float32");
      require_rows(w, T >= 0 ? T : -1, 0, cfg.topk, "(num_tokens, topk)");
    }
    out = output(output_, "out");
    require_holds(out, cfg.combine_dtype, "combine_dtype");
    require_rows(out, T >= 0 ? T : -1, 0, cfg.hidden, "(num_tokens, hidden)");
    for (const Array* a : {&pos, &w, &x})
      if (a->present) require_same_device(out, *a);
  }, [&] { fail_call(self, "combine"); });
  ep_call([&] {
    self.h->combine(x.present ? x.data() : nullptr, ptr<const std::int32_t>(pos), ptr<const float>(w), scale,
                    out.mutable_data(), stream_ptr(stream));
  });
}

nb::dict config_dict(const moe::ep::Config& c) {
  nb::dict d;
  d["max_tokens"] = c.max_tokens;
  d["hidden"] = c.hidden;
  d["dispatch_dtype"] = static_cast<int>(c.dispatch_dtype);
  d["combine_dtype"] = static_cast<int>(c.combine_dtype);
  d["topk"] = c.topk;
  d["scales_per_token"] = c.scales_per_token;
  d["mode"] = static_cast<int>(c.mode);
  d["capacity"] = c.capacity;
  d["slot_capacity"] = c.slot_capacity;
  d["max_recv_rows"] = c.max_recv_rows;
  d["max_recv_slots"] = c.max_recv_slots;
  return d;
}

nb::dict phases_dict(const moe::ep::Handle::Phases& p) {
  nb::dict d;
  d["layout"] = p.layout;
  d["pack"] = p.pack;
  d["exchange"] = p.exchange;
  d["unpack"] = p.unpack;
  d["reduce"] = p.reduce;
  d["bytes_sent"] = p.bytes_sent;
  d["bytes_received"] = p.bytes_received;
  return d;
}

}  // namespace

void register_ep(nb::module_& m) {
  m.def("ep_transport_available", [](int t) { return moe::ep::transport_available(static_cast<moe_ep_transport_t>(t)); });

  nb::class_<EpComm>(m, "EpComm")
      .def_ro("transport", &EpComm::transport)
      .def("rank", [](const EpComm& c) { return c.comm.rank(); })
      .def("world_size", [](const EpComm& c) { return c.comm.world_size(); })
      .def("num_experts", [](const EpComm& c) { return c.comm.num_experts(); })
      .def("num_local_experts", [](const EpComm& c) { return c.comm.num_local_experts(); })
      .def("expert_map", [](const EpComm& c) { return c.comm.expert_map(); })
      .def("local_experts", [](const EpComm& c) { return c.comm.local_experts(); });
  m.def("ep_comm_mpi", &comm_mpi, nb::arg("mpi_comm_address"), nb::arg("num_experts"), nb::arg("expert_rank"),
        nb::arg("expert_local"));
  m.def("ep_comm_nccl", &comm_nccl, nb::arg("nccl_comm"), nb::arg("num_experts"), nb::arg("expert_rank"),
        nb::arg("expert_local"));

  nb::class_<EpHandle>(m, "EpHandle")
      .def_ro("transport", &EpHandle::transport)
      .def("config", [](const EpHandle& h) { return config_dict(h.h->config()); })
      .def("recv_buffer_rows", [](const EpHandle& h) { return h.h->recv_buffer_rows(); })
      .def("staging_bytes", [](const EpHandle& h) { return h.h->staging_bytes(); })
      .def("set_timing", [](EpHandle& h, bool on) { h.h->set_timing(on); })
      .def("phases", [](const EpHandle& h) { return phases_dict(h.h->phases()); })
      .def("reset_phases", [](EpHandle& h) { h.h->reset_phases(); })
      .def("fail", &fail_call, nb::arg("op"))
      .def("dispatch_layout", &dispatch_layout, nb::arg("topk_ids").none(), nb::arg("stream"))
      .def("dispatch", &dispatch, nb::arg("hidden").none(), nb::arg("scales").none(), nb::arg("topk_weights").none(),
           nb::arg("recv_hidden").none(), nb::arg("recv_scales").none(), nb::arg("recv_topk_ids").none(),
           nb::arg("recv_topk_weights").none(), nb::arg("num_tokens"), nb::arg("stream"))
      .def("combine", &combine, nb::arg("expert_out").none(), nb::arg("token_positions").none(),
           nb::arg("topk_weights").none(), nb::arg("scale"), nb::arg("out").none(), nb::arg("num_tokens"),
           nb::arg("recv_rows"), nb::arg("stream"))
      .def("check_status", [](EpHandle& h, std::uintptr_t stream) { ep_call([&] { h.h->check_status(stream_ptr(stream)); }); },
           nb::arg("stream"));
  m.def("ep_handle_create", &handle_create, nb::arg("comm"), nb::arg("max_tokens"), nb::arg("hidden"),
        nb::arg("dispatch_dtype"), nb::arg("combine_dtype"), nb::arg("topk"), nb::arg("scales_per_token"),
        nb::arg("mode"), nb::arg("capacity"), nb::arg("slot_capacity"), nb::arg("max_recv_rows"),
        nb::arg("max_recv_slots"));
  m.def("ep_handle_create_fail", &handle_create_fail, nb::arg("comm"));
}

}  // namespace moe_py
