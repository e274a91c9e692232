// Registration of the kernels of one .cu file with the CPU runtime
// (cudacpu.cpp). standin.go generates, for each source, a unit that
// includes cudacpu.h, the source, this header, and one FERRY_REGISTER line
// per `extern "C" __global__` function it finds in the source.
#pragma once

#include <utility>

extern "C" void ferry_register(const char* name, void* fn, void (*invoke)(void* fn, void* const* params), int nparams,
                               const int* sizes);

template <typename T>
__attribute__((no_sanitize_thread)) static inline T ferry_param(void* p) {
  T v;
  memcpy(&v, p, sizeof v);
  return v;
}

template <typename... A, size_t... I>
__attribute__((no_sanitize_thread)) static void ferry_invoke_seq(void* fn, void* const* p, std::index_sequence<I...>) {
  ((void (*)(A...))fn)(ferry_param<A>(p[I])...);
}

// Calls fn with the parameters' bytes (as the driver received them, device
// addresses already mapped to host memory) converted to its argument types.
template <typename... A>
__attribute__((no_sanitize_thread)) static void ferry_invoke(void* fn, void* const* p) {
  ferry_invoke_seq<A...>(fn, p, std::index_sequence_for<A...>{});
}

struct ferry_registration {
  template <typename... A>
  ferry_registration(const char* name, void (*fn)(A...)) {
    static const int sizes[] = {(int)sizeof(A)..., 0};
    ferry_register(name, (void*)fn, &ferry_invoke<A...>, (int)sizeof...(A), sizes);
  }
};

#define FERRY_REGISTER(fn) static ferry_registration ferry_registration_##fn(#fn, fn);
