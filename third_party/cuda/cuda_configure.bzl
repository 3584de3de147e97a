"""Finds the CUDA toolkit (with CUPTI, cuDNN, NCCL) at $CUDA_PATH or /usr/local/cuda.

Creates @local_cuda with:
  //:defs.bzl  HAVE_CUDA (bool), NVCC (absolute path, or "" without CUDA), CUDA_ROOT, and
      CUDA_ONLY: the `target_compatible_with` value for a target that needs the toolkit
      ([] with it, ["@local_cuda//:incompatible"] without).
  //:cudart, //:cupti, //:cudnn, //:cublas, //:nccl  cc_library targets; without the toolkit
      they are marked incompatible, so targets that depend on them are skipped by
      `bazel build //...` and `bazel test //...` instead of failing.
  //:incompatible  a constraint value that no platform has. Debian's bazel-platforms 0.0.2
      lacks @platforms//:incompatible, so this stands in for it.
"""

_INCOMPATIBLE = "@local_cuda//:incompatible"

# Always in @local_cuda's BUILD: a constraint that no platform sets, so a target listing its
# value in target_compatible_with is skipped as incompatible.
_INCOMPATIBLE_BUILD = """constraint_setting(name = "never")

constraint_value(
    name = "incompatible",
    constraint_setting = ":never",
)
"""

_LIBS = {
    # name: (header globs, libraries)
    "cudart": (["include/cuda*.h", "include/crt/**", "include/*.hpp", "include/*.h"], ["cudart"]),
    "cupti": (["include/cupti*.h", "include/generated_*.h"], ["cupti"]),
    "cudnn": (["include/cudnn*.h"], ["cudnn"]),
    "cublas": (["include/cublas*.h"], ["cublas", "cublasLt"]),
    "nccl": (["include/nccl*.h"], ["nccl"]),
}

def _find_cuda(ctx):
    candidates = []
    if ctx.os.environ.get("CUDA_PATH"):
        candidates.append(ctx.os.environ["CUDA_PATH"])
    candidates.append("/usr/local/cuda")
    for c in candidates:
        p = ctx.path(c)
        if p.exists and ctx.path(c + "/bin/nvcc").exists and ctx.path(c + "/include/cuda_runtime.h").exists:
            return str(p.realpath)
    return None

def _cuda_configure_impl(ctx):
    root = _find_cuda(ctx)
    build = ['package(default_visibility = ["//visibility:public"])', "", _INCOMPATIBLE_BUILD]
    if root == None:
        ctx.file("defs.bzl", 'HAVE_CUDA = False\nNVCC = ""\nCUDA_ROOT = ""\nCUDA_ONLY = ["%s"]\n' % _INCOMPATIBLE)
        for name in _LIBS:
            build.append('cc_library(name = "%s", target_compatible_with = ["%s"])' % (name, _INCOMPATIBLE))
        ctx.file("BUILD", "\n".join(build) + "\n")
        return

    ctx.symlink(root + "/include", "include")
    libdir = root + "/lib64"
    ctx.file("defs.bzl", 'HAVE_CUDA = True\nNVCC = "%s/bin/nvcc"\nCUDA_ROOT = "%s"\nCUDA_ONLY = []\n' % (root, root))
    for name, (hdrs, libs) in _LIBS.items():
        linkopts = ["-L" + libdir, "-Wl,-rpath," + libdir] + ["-l" + l for l in libs]
        build.append("""cc_library(
    name = "{name}",
    hdrs = glob({hdrs}, allow_empty = True),
    includes = ["include"],
    linkopts = {linkopts},
    deps = {deps},
)
""".format(name = name, hdrs = repr(hdrs), linkopts = repr(linkopts),
           deps = repr([] if name == "cudart" else [":cudart"])))
    ctx.file("BUILD", "\n".join(build) + "\n")

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_PATH"],
    local = True,
)
