#include "worker/gpu/dl_symbols.h"

#include <dlfcn.h>

#include <utility>

namespace headroom {
namespace gpu {

void* OpenLibrary(const std::string& lib, std::string* why_not) {
  dlerror();  // clear any earlier error
  void* handle = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr && why_not != nullptr) {
    const char* error = dlerror();
    *why_not = error != nullptr ? error : "dlopen(" + lib + ") failed";
  }
  return handle;
}

SymbolResolver::SymbolResolver(void* handle, std::string lib)
    : handle_(handle), lib_(std::move(lib)) {}

void* SymbolResolver::Find(std::initializer_list<const char*> names,
                           bool required) {
  for (const char* name : names) {
    if (void* symbol = dlsym(handle_, name)) return symbol;
  }
  if (required && names.size() > 0) {
    if (!missing_.empty()) missing_ += ", ";
    missing_ += *names.begin();
  }
  return nullptr;
}

std::string SymbolResolver::missing() const {
  return lib_ + " does not export " + missing_;
}

}  // namespace gpu
}  // namespace headroom
