// civetweb (under prometheus-cpp's Exposer, the metrics endpoint) creates its threads with
// 100 KiB stacks. glibc refuses a stack smaller than the process's static TLS plus a little,
// and headroomd loads cuBLAS (for the cuda backend), whose static TLS alone is 92 KiB: every
// civetweb thread then fails with EINVAL. This definition of pthread_create, which the
// dynamic linker binds before libc's, raises an explicit stack size below 1 MiB to 1 MiB
// (address space only: the pages are touched as used) and calls libc's.
#include <dlfcn.h>
#include <pthread.h>

namespace {

constexpr size_t kStackFloorBytes = size_t{1} << 20;

using CreateFn = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);

CreateFn LibcCreate() {
  static const CreateFn create = reinterpret_cast<CreateFn>(dlsym(RTLD_NEXT, "pthread_create"));
  return create;
}

}  // namespace

extern "C" int pthread_create(pthread_t* thread, const pthread_attr_t* attr,
                              void* (*start)(void*), void* arg) {
  size_t stack_bytes = 0;
  if (attr == nullptr || pthread_attr_getstacksize(attr, &stack_bytes) != 0 ||
      stack_bytes >= kStackFloorBytes) {
    return LibcCreate()(thread, attr, start, arg);
  }
  pthread_attr_t raised = *attr;
  pthread_attr_setstacksize(&raised, kStackFloorBytes);
  return LibcCreate()(thread, &raised, start, arg);
}
