#ifndef HEADROOM_WORKER_GPU_DL_SYMBOLS_H_
#define HEADROOM_WORKER_GPU_DL_SYMBOLS_H_

// dlopen and dlsym with reasons a person can act on, shared by the NVML and
// CUDA driver loaders.

#include <initializer_list>
#include <string>

namespace headroom {
namespace gpu {

// dlopen(lib, RTLD_NOW | RTLD_LOCAL). Null with dlerror's text (which names
// the file) when the library cannot be loaded.
void* OpenLibrary(const std::string& lib, std::string* why_not);

// Resolves entry points of one open library into typed function pointers,
// remembering which required ones are missing so that the caller reports
// them all at once.
class SymbolResolver {
 public:
  SymbolResolver(void* handle, std::string lib);

  // Sets *fn to the first of `names` the library exports (newest first, e.g.
  // {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"}); when none is exported,
  // *fn is null and the first name is recorded as missing.
  template <typename Fn>
  void Required(Fn* fn, std::initializer_list<const char*> names) {
    *fn = reinterpret_cast<Fn>(Find(names, /*required=*/true));
  }

  // As Required, but a missing symbol is not recorded: *fn is just null.
  template <typename Fn>
  void Optional(Fn* fn, std::initializer_list<const char*> names) {
    *fn = reinterpret_cast<Fn>(Find(names, /*required=*/false));
  }

  // True when every required symbol was found.
  bool ok() const { return missing_.empty(); }

  // "<lib> does not export a, b" when !ok().
  std::string missing() const;

 private:
  void* Find(std::initializer_list<const char*> names, bool required);

  void* handle_;
  std::string lib_;
  std::string missing_;  // comma-separated names
};

}  // namespace gpu
}  // namespace headroom

#endif  // HEADROOM_WORKER_GPU_DL_SYMBOLS_H_
