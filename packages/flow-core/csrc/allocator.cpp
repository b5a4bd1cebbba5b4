// The CPU caching allocator: a NumPy data-memory handler (NEP 49, NumPy >= 1.22) that keeps freed
// large blocks for reuse instead of handing them back to the OS.
//
// Why: glibc serves large requests with mmap and gives them back with munmap on free, so each
// activation / gradient buffer of a training step is page-faulted in again on every step (ResNet-18
// spent ~200 ms of system time per step in page faults). Blocks kept here stay faulted in.
//
// Policy:
//  * requests below kMinBytes go straight to malloc/calloc/realloc/free (cheap, and glibc already
//    caches small chunks in its arenas);
//  * larger ones are rounded up to a bucket (powers of two with four sub-steps: at most 25% slack)
//    and served from that bucket's free list (a "hit") or freshly mapped (a "miss");
//  * a freed block goes back to its bucket's free list while the cached bytes stay within the limit
//    (set by flow.cpu from FLOW_CPU_CACHE_MB); beyond it the largest cached blocks are released;
//  * calloc of a reused block memsets it; a freshly mapped one is zero already (and left untouched,
//    so that its pages are only faulted in when used).
//
// NumPy stores the handler in each array (arr->mem_handler), so a block allocated here is always
// freed here, also after the handler was uninstalled; every entry point therefore stays valid for
// the life of the process. The handler is a context variable in NumPy: installing it affects the
// calling thread's context (threads started later begin with NumPy's default handler).
//
// The NumPy C API is only used in this translation unit (PyArray_API stays static here: no
// PY_ARRAY_UNIQUE_SYMBOL), so the rest of flow._C is unaffected by it.
#define NPY_NO_DEPRECATED_API NPY_1_22_API_VERSION
#define NPY_TARGET_VERSION NPY_1_22_API_VERSION  // PyDataMem_SetHandler: runs on NumPy 1.22+ and 2.x

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include <numpy/arrayobject.h>

#if defined(__unix__) || defined(__APPLE__)
#include <pthread.h>
#include <sys/mman.h>
#define FLOW_ALLOC_MMAP 1
#endif

#include "kernels.h"

namespace py = pybind11;

namespace flow_native {
namespace {

constexpr std::size_t kMinBytes = std::size_t(64) << 10;  // smaller requests go to malloc

// Bucket of a request of at least kMinBytes: the next multiple of a quarter of the largest power
// of two not above it (64 KiB, 80, 96, 112, 128, 160, ...).
std::size_t bucket_of(std::size_t n) {
  int p = 63 - __builtin_clzll(static_cast<unsigned long long>(n));
  std::size_t step = std::size_t(1) << (p - 2);
  return (n + step - 1) / step * step;
}

void* map_block(std::size_t bytes) {
#ifdef FLOW_ALLOC_MMAP
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
#else
  return std::calloc(1, bytes);  // zeroed, as fresh mmap pages are
#endif
}

void unmap_block(void* p, std::size_t bytes) {
#ifdef FLOW_ALLOC_MMAP
  munmap(p, bytes);
#else
  (void)bytes;
  std::free(p);
#endif
}

struct Live {
  std::size_t bucket;
  std::size_t requested;
};

struct Stats {
  std::int64_t allocated = 0, allocated_peak = 0;  // bytes of blocks in use (bucket sizes)
  std::int64_t requested = 0, requested_peak = 0;  // bytes asked for by those blocks
  std::int64_t reserved = 0, reserved_peak = 0;    // in use + cached: what the cache holds from the OS
  std::int64_t cached = 0;
  std::int64_t num_allocs = 0, hits = 0, misses = 0, num_frees = 0, releases = 0, retries = 0;
  std::int64_t ooms = 0;
};

struct Cache;
Cache& cache();

struct Cache {
  std::mutex mu;
  std::unordered_map<void*, Live> live;            // blocks handed out by the cache
  std::map<std::size_t, std::vector<void*>> free;  // bucket size -> cached blocks
  Stats st;
  std::size_t limit = std::size_t(1) << 30;
  std::atomic<bool> caching{true};
  std::atomic<std::int64_t> small_allocs{0};

  // Release cached blocks, largest first, until `bytes` more would fit under `limit`; mu held.
  void trim_for(std::size_t bytes, std::size_t lim) {
    while (!free.empty() && static_cast<std::size_t>(st.cached) + bytes > lim) {
      auto it = std::prev(free.end());
      void* p = it->second.back();
      it->second.pop_back();
      unmap_block(p, it->first);
      st.cached -= static_cast<std::int64_t>(it->first);
      st.reserved -= static_cast<std::int64_t>(it->first);
      st.releases++;
      if (it->second.empty()) free.erase(it);
    }
  }

  void* alloc(std::size_t n, bool zero) {
    std::size_t b = bucket_of(n);
    void* p = nullptr;
    bool hit = false;
    {
      std::lock_guard<std::mutex> lock(mu);
      auto it = free.find(b);
      if (it != free.end()) {
        p = it->second.back();
        it->second.pop_back();
        if (it->second.empty()) free.erase(it);
        st.cached -= static_cast<std::int64_t>(b);
        hit = true;
      }
    }
    if (p == nullptr) {
      p = map_block(b);
      if (p == nullptr) {  // out of memory: give the cache back and try once more
        {
          std::lock_guard<std::mutex> lock(mu);
          trim_for(0, 0);
          st.retries++;
        }
        p = map_block(b);
      }
      if (p == nullptr) {
        std::lock_guard<std::mutex> lock(mu);
        st.ooms++;
        return nullptr;
      }
    } else if (zero) {
      std::memset(p, 0, n);  // only the requested bytes are ever read through this array
    }
    std::lock_guard<std::mutex> lock(mu);
    live.emplace(p, Live{b, n});
    st.num_allocs++;
    (hit ? st.hits : st.misses)++;
    if (!hit) {
      st.reserved += static_cast<std::int64_t>(b);
      if (st.reserved > st.reserved_peak) st.reserved_peak = st.reserved;
    }
    st.allocated += static_cast<std::int64_t>(b);
    st.requested += static_cast<std::int64_t>(n);
    if (st.allocated > st.allocated_peak) st.allocated_peak = st.allocated;
    if (st.requested > st.requested_peak) st.requested_peak = st.requested;
    return p;
  }

  // Returns false when `p` is not a cache block (it came from malloc).
  bool release(void* p) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = live.find(p);
    if (it == live.end()) return false;
    Live l = it->second;
    live.erase(it);
    st.num_frees++;
    st.allocated -= static_cast<std::int64_t>(l.bucket);
    st.requested -= static_cast<std::int64_t>(l.requested);
    if (caching.load(std::memory_order_relaxed) && l.bucket <= limit) {
      trim_for(l.bucket, limit);
      free[l.bucket].push_back(p);
      st.cached += static_cast<std::int64_t>(l.bucket);
    } else {
      unmap_block(p, l.bucket);
      st.reserved -= static_cast<std::int64_t>(l.bucket);
      st.releases++;
    }
    return true;
  }

  // The usable size of a cache block (its bucket), or 0 when `p` is not one; mu not held.
  std::size_t bucket_of_block(void* p) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = live.find(p);
    return it == live.end() ? 0 : it->second.bucket;
  }
};

Cache* new_cache() {
  Cache* c = new Cache();  // never destroyed: arrays may be freed during interpreter exit
#ifdef FLOW_ALLOC_MMAP
  // A fork while another thread holds the mutex would leave it locked forever in the child (DataLoader
  // workers fork): hold it across fork, so that both sides start with it free.
  pthread_atfork([] { cache().mu.lock(); }, [] { cache().mu.unlock(); }, [] { cache().mu.unlock(); });
#endif
  return c;
}

Cache& cache() {
  static Cache* c = new_cache();
  return *c;
}

bool use_cache(std::size_t n) { return n >= kMinBytes && cache().caching.load(std::memory_order_relaxed); }

void* h_malloc(void*, std::size_t n) {
  if (!use_cache(n)) {
    cache().small_allocs.fetch_add(1, std::memory_order_relaxed);
    return std::malloc(n);
  }
  return cache().alloc(n, false);
}

void* h_calloc(void*, std::size_t nelem, std::size_t elsize) {
  if (elsize != 0 && nelem > SIZE_MAX / elsize) return nullptr;
  std::size_t n = nelem * elsize;
  if (!use_cache(n)) {
    cache().small_allocs.fetch_add(1, std::memory_order_relaxed);
    return std::calloc(nelem, elsize);
  }
  return cache().alloc(n, true);
}

void h_free(void*, void* p, std::size_t) {
  // the size NumPy passes is not relied on: the cache knows its own blocks
  if (p == nullptr) return;
  if (!cache().release(p)) std::free(p);
}

void* h_realloc(void* ctx, void* p, std::size_t n) {
  if (p == nullptr) return h_malloc(ctx, n);
  std::size_t have = cache().bucket_of_block(p);
  if (have == 0) return std::realloc(p, n);  // a malloc block stays one
  if (n <= have && n >= have / 2) return p;  // fits, and not wasting most of the block
  void* q = n >= kMinBytes ? cache().alloc(n, false) : std::malloc(n == 0 ? 1 : n);
  if (q == nullptr) return nullptr;  // realloc semantics: the old block stays valid
  std::memcpy(q, p, n < have ? n : have);
  cache().release(p);
  return q;
}

PyDataMem_Handler g_handler = {
    "flow_caching_allocator", 1, {nullptr, h_malloc, h_calloc, h_realloc, h_free}};

PyObject* g_capsule = nullptr;  // one reference kept for the life of the process
bool g_numpy_ready = false;

void ensure_numpy() {
  if (g_numpy_ready) return;
  if (_import_array() < 0) throw py::error_already_set();
  g_numpy_ready = true;
  g_capsule = PyCapsule_New(&g_handler, "mem_handler", nullptr);
  if (g_capsule == nullptr) throw py::error_already_set();
}

std::string current_handler_name() {
  PyObject* h = PyDataMem_GetHandler();
  if (h == nullptr) throw py::error_already_set();
  auto* handler = static_cast<PyDataMem_Handler*>(PyCapsule_GetPointer(h, "mem_handler"));
  std::string name = handler != nullptr ? handler->name : "";
  Py_DECREF(h);
  if (handler == nullptr) throw py::error_already_set();
  return name;
}

// Install the handler in the calling context; returns the name of the handler it replaced. Refuses
// (std::string of that name, nothing installed) when a handler other than NumPy's default is there.
std::string alloc_install() {
  ensure_numpy();
  std::string name = current_handler_name();
  if (name == g_handler.name || name != "default_allocator") return name;
  PyObject* old = PyDataMem_SetHandler(g_capsule);
  if (old == nullptr) throw py::error_already_set();
  Py_DECREF(old);
  return name;
}

// Put NumPy's default handler back in the calling context (if ours is installed there).
bool alloc_uninstall() {
  ensure_numpy();
  if (current_handler_name() != g_handler.name) return false;
  PyObject* old = PyDataMem_SetHandler(nullptr);
  if (old == nullptr) throw py::error_already_set();
  Py_DECREF(old);
  return true;
}

py::dict alloc_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  const Stats& s = c.st;
  std::int64_t cached_blocks = 0;
  for (auto& kv : c.free) cached_blocks += static_cast<std::int64_t>(kv.second.size());
  py::dict d;
  d["allocated_bytes.current"] = s.allocated;
  d["allocated_bytes.peak"] = s.allocated_peak;
  d["requested_bytes.current"] = s.requested;
  d["requested_bytes.peak"] = s.requested_peak;
  d["reserved_bytes.current"] = s.reserved;
  d["reserved_bytes.peak"] = s.reserved_peak;
  d["cached_bytes.current"] = s.cached;
  d["active_blocks.current"] = static_cast<std::int64_t>(c.live.size());
  d["cached_blocks.current"] = cached_blocks;
  d["cached_buckets.current"] = static_cast<std::int64_t>(c.free.size());
  d["num_allocs"] = s.num_allocs;
  d["num_cache_hits"] = s.hits;
  d["num_cache_misses"] = s.misses;
  d["num_frees"] = s.num_frees;
  d["num_releases"] = s.releases;
  d["num_alloc_retries"] = s.retries;
  d["num_ooms"] = s.ooms;
  d["num_small_allocs"] = c.small_allocs.load(std::memory_order_relaxed);
  d["limit_bytes"] = static_cast<std::int64_t>(c.limit);
  d["min_block_bytes"] = static_cast<std::int64_t>(kMinBytes);
  d["caching"] = c.caching.load();
  return d;
}

std::int64_t alloc_empty_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  std::int64_t before = c.st.cached;
  c.trim_for(0, 0);
  return before;
}

void alloc_reset_peaks() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.st.allocated_peak = c.st.allocated;
  c.st.requested_peak = c.st.requested;
  c.st.reserved_peak = c.st.reserved;
}

void alloc_set_limit(std::int64_t bytes) {
  if (bytes < 0) throw py::value_error("alloc_set_limit: bytes must be >= 0, got " + std::to_string(bytes));
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  c.limit = static_cast<std::size_t>(bytes);
  c.trim_for(0, c.limit);
}

void alloc_set_caching(bool on) {
  Cache& c = cache();
  c.caching.store(on);
  if (!on) {
    std::lock_guard<std::mutex> lock(c.mu);
    c.trim_for(0, 0);
  }
}

}  // namespace

void register_allocator(py::module_& m) {
  m.def("alloc_install", &alloc_install,
        "Install the caching NumPy memory handler in this context; returns the name of the handler found.");
  m.def("alloc_uninstall", &alloc_uninstall, "Restore NumPy's default handler here; False if ours was not set.");
  m.def("alloc_handler_name", [] {
    ensure_numpy();
    return current_handler_name();
  });
  m.def("alloc_stats", &alloc_stats, "Counters of the caching allocator (a dict).");
  m.def("alloc_empty_cache", &alloc_empty_cache, "Release every cached block; returns the bytes released.");
  m.def("alloc_reset_peaks", &alloc_reset_peaks, "Reset the peak counters to the current values.");
  m.def("alloc_set_limit", &alloc_set_limit, py::arg("bytes"), "Most bytes kept cached (trims now if above).");
  m.def("alloc_set_caching", &alloc_set_caching, py::arg("on"),
        "Cache freed blocks (True) or release them at once and serve everything from malloc (False).");
  m.def("alloc_bucket", [](std::size_t n) { return n < kMinBytes ? n : bucket_of(n); }, py::arg("nbytes"),
        "Bytes the cache reserves for a request of nbytes.");
}

}  // namespace flow_native
