// echo_npu glue registry: native op names, fallback routes, faults and fallback counters.
#include "registry.h"

#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>

namespace enpu {
namespace {

std::mutex g_mu;
std::map<std::string, bool>& natives() {  // name -> routable
  static std::map<std::string, bool> m;
  return m;
}
std::set<std::string> g_routes;
std::atomic<bool> g_any_route{false};
std::map<std::string, int64_t> g_counts;
std::atomic<uint64_t> g_faults{0};

const std::vector<std::string> kFaultNames = {
#define ENPU_FAULT(id, name, description) name,
#include "faults.def"
#undef ENPU_FAULT
};
const std::vector<std::string> kFaultDescriptions = {
#define ENPU_FAULT(id, name, description) description,
#include "faults.def"
#undef ENPU_FAULT
};
static_assert(
#define ENPU_FAULT(id, name, description) +1
#include "faults.def"
#undef ENPU_FAULT
        <= 64,
    "fault bits live in one uint64_t");

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

void register_native(const std::string& name, bool routable) {
  std::lock_guard<std::mutex> lk(g_mu);
  natives()[name] = routable;
}

std::vector<std::string> native_ops() {
  std::lock_guard<std::mutex> lk(g_mu);
  std::vector<std::string> v;
  for (const auto& kv : natives()) v.push_back(kv.first);
  return v;
}

bool routed(const char* name) {
  if (!g_any_route.load(std::memory_order_relaxed)) return false;
  std::lock_guard<std::mutex> lk(g_mu);
  return g_routes.count(name) != 0;
}

void set_routes(const std::vector<std::string>& names) {
  std::lock_guard<std::mutex> lk(g_mu);
  std::set<std::string> next;
  for (const auto& n : names) {
    auto it = natives().find(n);
    if (it == natives().end())
      throw std::invalid_argument("unknown native op '" + n +
                                  "' for fallback routing; see echo_npu.native_ops()");
    if (!it->second)
      throw std::invalid_argument("op '" + n +
                                  "' cannot be routed through cpu_fallback (the fallback itself "
                                  "needs it: empty*, _copy_from*, as_strided, view, resize_, set_)");
    next.insert(n);
  }
  g_routes = next;
  g_any_route = !g_routes.empty();
}

std::vector<std::string> get_routes() {
  std::lock_guard<std::mutex> lk(g_mu);
  return {g_routes.begin(), g_routes.end()};
}

bool fault(Fault f) { return (g_faults.load(std::memory_order_relaxed) >> static_cast<int>(f)) & 1u; }

void set_faults(const std::vector<std::string>& names) {
  uint64_t bits = 0;
  for (const auto& n : names) {
    size_t i = 0;
    while (i < kFaultNames.size() && kFaultNames[i] != n) ++i;
    if (i == kFaultNames.size())
      throw std::invalid_argument("unknown echo_npu fault '" + n + "'; valid: " + join(kFaultNames));
    bits |= uint64_t{1} << i;
  }
  g_faults = bits;
}

std::vector<std::string> get_faults() {
  std::vector<std::string> v;
  for (size_t i = 0; i < kFaultNames.size(); ++i)
    if ((g_faults.load() >> i) & 1u) v.push_back(kFaultNames[i]);
  return v;
}

std::vector<std::string> fault_names() { return kFaultNames; }

std::vector<std::pair<std::string, std::string>> fault_descriptions() {
  std::vector<std::pair<std::string, std::string>> v;
  for (size_t i = 0; i < kFaultNames.size(); ++i) v.emplace_back(kFaultNames[i], kFaultDescriptions[i]);
  return v;
}

void count_fallback(const std::string& name) {
  std::lock_guard<std::mutex> lk(g_mu);
  g_counts[name] += 1;
}

std::map<std::string, int64_t> fallback_counts() {
  std::lock_guard<std::mutex> lk(g_mu);
  return g_counts;
}

void reset_fallback_counts() {
  std::lock_guard<std::mutex> lk(g_mu);
  g_counts.clear();
}

const char* intern(const std::string& name) {
  static std::mutex mu;
  static std::set<std::string> pool;
  std::lock_guard<std::mutex> lk(mu);
  return pool.insert(name).first->c_str();
}

}  // namespace enpu
