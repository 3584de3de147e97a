"""cuda_library: compiles .cu files with nvcc into a cc_library, where CUDA is present."""

load("@local_cuda//:defs.bzl", "CUDA_ONLY", "HAVE_CUDA", "NVCC")
load("@rules_cc//cc:defs.bzl", "cc_library")

# Hopper (H100, H200) natively, Ampere natively, and PTX for anything newer.
_GENCODE = [
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
]

def _nvcc_objects_impl(ctx):
    """Compiles each .cu in srcs to one .o, seeing the headers and include paths of deps."""
    cc = cc_common.merge_cc_infos(cc_infos = [d[CcInfo] for d in ctx.attr.deps]).compilation_context
    inputs = depset(ctx.files.hdrs, transitive = [cc.headers])
    flags = ["-std=c++17", "-O3", "-Xcompiler", "-fPIC", "-I.", "-I" + ctx.bin_dir.path] + _GENCODE
    flags += ["-D" + d for d in cc.defines.to_list()]
    flags += ["-I" + i for i in cc.quote_includes.to_list() + cc.includes.to_list()]
    flags += ["-isystem=" + i for i in cc.system_includes.to_list()]
    objs = []
    for src in ctx.files.srcs:
        # <name>/<path in package>.o, e.g. bazel-bin/executor/cuda/device_info_nvcc/device_info.o
        rel = src.short_path[len(ctx.label.package) + 1:] if ctx.label.package else src.short_path
        obj = ctx.actions.declare_file("%s/%s.o" % (ctx.label.name, rel[:-len(".cu")]))
        ctx.actions.run(
            executable = NVCC,
            arguments = flags + ["-c", src.path, "-o", obj.path],
            inputs = depset([src], transitive = [inputs]),
            outputs = [obj],
            mnemonic = "NvccCompile",
            progress_message = "Compiling %s with nvcc" % src.short_path,
            # nvcc runs the host compiler (g++) found on PATH.
            use_default_shell_env = True,
        )
        objs.append(obj)
    return [DefaultInfo(files = depset(objs))]

_nvcc_objects = rule(
    implementation = _nvcc_objects_impl,
    attrs = {
        "srcs": attr.label_list(allow_files = [".cu"]),
        "hdrs": attr.label_list(allow_files = True),
        "deps": attr.label_list(providers = [CcInfo]),
    },
)

def cuda_library(name, srcs, hdrs = [], deps = [], visibility = None, testonly = False):
    """A cc_library whose .cu sources are compiled by nvcc; skipped without CUDA.

    nvcc sees this library's hdrs and the headers, include paths and defines of deps (so a
    .cu may include generated .pb.h files and other packages' headers), plus the toolkit's
    own headers. The CUDA toolkit headers need no dep; libcudart is always linked.

    Args:
      name: the cc_library.
      srcs: .cu files (compiled by nvcc) and .cc files (compiled as usual).
      hdrs: headers, visible to both compilers.
      deps: cc dependencies; @local_cuda//:cudart is always added.
      visibility, testonly: as for cc_library.
    """
    cu = [s for s in srcs if s.endswith(".cu")]
    cc = [s for s in srcs if not s.endswith(".cu")]
    objs = []
    if HAVE_CUDA and cu:
        _nvcc_objects(
            name = name + "_nvcc",
            srcs = cu,
            hdrs = hdrs,
            deps = deps,
            testonly = testonly,
            visibility = ["//visibility:private"],
        )
        objs = [":" + name + "_nvcc"]
    cc_library(
        name = name,
        srcs = cc + objs,
        hdrs = hdrs,
        deps = deps + ["@local_cuda//:cudart"],
        target_compatible_with = CUDA_ONLY,
        visibility = visibility,
        testonly = testonly,
    )
