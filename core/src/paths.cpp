// The thread-local path and caps overrides of paths.hpp.
#include "paths.hpp"

#include <algorithm>
#include <cstring>
#include <utility>

namespace moe {
namespace detail {

namespace {
thread_local std::vector<std::pair<std::string, std::string>> t_forced;  // (operation, path)
thread_local CapsLimits t_caps;
thread_local bool t_caps_set = false;

std::pair<std::string, std::string>* entry_of(const char* operation) {
  for (auto& e : t_forced)
    if (std::strcmp(e.first.c_str(), operation) == 0) return &e;
  return nullptr;
}
}  // namespace

ScopedForcedPath::ScopedForcedPath(std::string operation, std::string path) : operation_(std::move(operation)) {
  if (auto* e = entry_of(operation_.c_str())) {
    had_previous_ = true;
    previous_ = std::exchange(e->second, std::move(path));
  } else {
    t_forced.emplace_back(operation_, std::move(path));
  }
}

ScopedForcedPath::~ScopedForcedPath() {
  auto* e = entry_of(operation_.c_str());
  if (e == nullptr) return;
  if (had_previous_) {
    e->second = std::move(previous_);
  } else {
    t_forced.erase(t_forced.begin() + (e - t_forced.data()));
  }
}

const std::string* forced_path(const char* operation) {
  if (t_forced.empty()) return nullptr;
  const auto* e = entry_of(operation);
  return e == nullptr ? nullptr : &e->second;
}

std::string take_path(const char* operation, const std::vector<std::string>& applicable, const std::string& shape) {
  const std::string* forced = forced_path(operation);
  if (forced == nullptr) return applicable.front();
  const auto it = std::find(applicable.begin(), applicable.end(), *forced);
  if (it != applicable.end()) return *it;
  std::string list;
  for (const auto& p : applicable) list += (list.empty() ? "" : ", ") + p;
  throw Error(MOE_ERROR_UNSUPPORTED, std::string(operation) + ": the forced path '" + *forced + "' does not apply to " +
                                         shape + " on this build and device; paths that apply: " + list);
}

std::string align_path(const AlignShape& shape, moe_dtype_t id_type) {
  const std::vector<std::string> paths = backend::align_paths(shape, id_type);
  return take_path(kAlignOperation, paths,
                   "numel " + std::to_string(shape.numel) + ", num_experts " + std::to_string(shape.num_experts));
}

ScopedForcedCaps::ScopedForcedCaps(const CapsLimits& limits) : previous_(t_caps), had_previous_(t_caps_set) {
  t_caps = limits;
  t_caps_set = true;
}

ScopedForcedCaps::~ScopedForcedCaps() {
  t_caps = previous_;
  t_caps_set = had_previous_;
}

const CapsLimits* forced_caps() { return t_caps_set ? &t_caps : nullptr; }

}  // namespace detail
}  // namespace moe
