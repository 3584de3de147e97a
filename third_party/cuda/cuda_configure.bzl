"""Finds the CUDA toolkit and, each on its own, CUPTI, cuDNN, cuBLAS and NCCL.

The toolkit (nvcc, cudart) is looked for at $CUDA_PATH, else /usr/local/cuda. Each library is
then looked for, first match wins, in:
  1. its own variable, a prefix holding include/ and lib64/ or lib/ (or lib/x86_64-linux-gnu):
     CUPTI_PATH, CUDNN_PATH, CUBLAS_PATH, NCCL_PATH. A variable that is set but names no such
     prefix fails the build, naming what is missing;
  2. the toolkit: its include/ and lib64/ (a flattened install like this machine's), its
     targets/x86_64-linux/, and for CUPTI extras/CUPTI/ (a standard toolkit install);
  3. the system: /usr/include (or /usr/include/x86_64-linux-gnu) and /usr/lib/x86_64-linux-gnu
     (Debian's and NVIDIA's packages of cuDNN and NCCL);
  4. Python wheels in python3's site-packages: nvidia/cu13/ (CUDA 13's toolkit wheels),
     nvidia/cudnn/, nvidia/cublas/, nvidia/cuda_cupti/, nvidia/nccl/ ... (wheels ship only
     versioned objects such as libcudnn.so.9, which are then linked as -l:libcudnn.so.9).

Each library's cc_library carries its own include directory and its own -L and -rpath. Runpaths
use directories as given (/usr/local/cuda/lib64), never the resolved version directory
(/usr/local/cuda-13.0/lib64), so a toolkit upgrade behind the symlink needs no relink; default
system directories get neither -L nor -rpath. Binaries also get $ORIGIN/../lib, so a binary
copied beside the libraries it needs (tools/gpu's kit: bin/ and lib/) finds them unaided.

Creates @local_cuda with:
  //:defs.bzl  HAVE_CUDA (bool: nvcc, cudart, CUPTI, cuDNN and cuBLAS all found), NVCC (nvcc's
      resolved absolute path, or ""), CUDA_ROOT (as given, not resolved), CUDA_ONLY (the `target_compatible_with`
      value for a target that needs the toolkit: [] with it, ["@local_cuda//:incompatible"]
      without), and CUDA_LIBS: {library: {"source", "include", "libdir", "libs"}} for what was found.
  //:found.txt  the same, one line per library, and why CUDA is off if it is:
      cat "$(bazel info output_base)/external/local_cuda/found.txt"
  //:cudart, //:cupti, //:cudnn, //:cublas, //:nccl  cc_library targets; one whose library was not
      found is marked incompatible, so targets that depend on it are skipped by
      `bazel build //...` and `bazel test //...` instead of failing. NCCL is optional (nothing
      needs it yet); the other four are needed for HAVE_CUDA.
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

# What each library is, and where besides the common places it may live.
#   header: the file whose directory becomes the include path.
#   hdrs: globs, relative to that directory, that Bazel tracks as the library's headers.
#   libs: the shared objects to link, lib<name>.so or lib<name>.so.<N>.
#   env: the variable naming a prefix for it.
#   toolkit: prefixes inside the toolkit, tried in order ("" is the toolkit itself).
#   system: whether /usr is tried.
#   wheels: directories under site-packages/nvidia/, tried in order.
_LIBS = {
    "cudart": struct(
        header = "cuda_runtime.h",
        hdrs = ["cuda*.h", "crt/**", "*.hpp", "*.h"],
        libs = ["cudart"],
        env = "CUDA_PATH",
        toolkit = ["", "targets/x86_64-linux"],
        system = False,
        wheels = [],
    ),
    "cupti": struct(
        header = "cupti.h",
        hdrs = ["cupti*.h", "generated_*.h", "nvperf*.h"],
        libs = ["cupti"],
        env = "CUPTI_PATH",
        toolkit = ["", "extras/CUPTI", "targets/x86_64-linux"],
        system = True,
        wheels = ["cu13", "cuda_cupti"],
    ),
    "cudnn": struct(
        header = "cudnn.h",
        hdrs = ["cudnn*.h"],
        libs = ["cudnn"],
        env = "CUDNN_PATH",
        toolkit = ["", "targets/x86_64-linux"],
        system = True,
        wheels = ["cudnn"],
    ),
    "cublas": struct(
        header = "cublas_v2.h",
        hdrs = ["cublas*.h"],
        libs = ["cublas", "cublasLt"],
        env = "CUBLAS_PATH",
        toolkit = ["", "targets/x86_64-linux"],
        system = True,
        wheels = ["cu13", "cublas"],
    ),
    "nccl": struct(
        header = "nccl.h",
        hdrs = ["nccl*.h"],
        libs = ["nccl"],
        env = "NCCL_PATH",
        toolkit = ["", "targets/x86_64-linux"],
        system = True,
        wheels = ["nccl"],
    ),
}

# Needed for HAVE_CUDA; NCCL is not.
_REQUIRED = ["cudart", "cupti", "cudnn", "cublas"]

_INCLUDE_SUBDIRS = ["include", "include/x86_64-linux-gnu"]
_LIB_SUBDIRS = ["lib64", "lib", "lib/x86_64-linux-gnu"]

# The compiler and linker search these anyway: naming them with -isystem breaks libstdc++'s
# #include_next, and -L/-rpath to them would only reorder the search.
_SYSTEM_INCLUDE_DIRS = ["/usr/include", "/usr/include/x86_64-linux-gnu", "/usr/local/include"]
_SYSTEM_LIB_DIRS = ["/usr/lib/x86_64-linux-gnu", "/usr/lib", "/usr/lib64", "/lib/x86_64-linux-gnu", "/lib", "/lib64"]

def _join(a, b):
    return a if not b else a.rstrip("/") + "/" + b

def _find_shared_object(ctx, libdir, name):
    """Returns the file name to link for lib<name> in libdir ("libx.so" or "libx.so.N"), or None."""
    if ctx.path(libdir + "/lib%s.so" % name).exists:
        return "lib%s.so" % name
    prefix = "lib%s.so." % name
    best = None
    for f in ctx.path(libdir).readdir():
        b = f.basename
        if b.startswith(prefix) and (best == None or len(b) < len(best)):
            best = b
    return best

def _find_in_prefix(ctx, spec, prefix):
    """Returns struct(include, libdir, files) for spec under prefix, or a string saying what is missing."""
    include = None
    for sub in _INCLUDE_SUBDIRS:
        if ctx.path(_join(prefix, sub) + "/" + spec.header).exists:
            include = _join(prefix, sub)
            break
    if include == None:
        return "no %s in %s" % (spec.header, " or ".join([_join(prefix, s) for s in _INCLUDE_SUBDIRS]))
    for sub in _LIB_SUBDIRS:
        libdir = _join(prefix, sub)
        if not ctx.path(libdir).exists:
            continue
        files = [_find_shared_object(ctx, libdir, l) for l in spec.libs]
        if None not in files:
            return struct(include = include, libdir = libdir, files = files)
    return "no %s in %s" % (
        " and ".join(["lib%s.so*" % l for l in spec.libs]),
        " or ".join([_join(prefix, s) for s in _LIB_SUBDIRS]),
    )

def _site_packages(ctx):
    """Returns python3's site-packages directories (empty without python3)."""
    python = ctx.which("python3")
    if python == None:
        return []
    r = ctx.execute([python, "-c", "import site; print('\\n'.join(site.getsitepackages() + [site.getusersitepackages()]))"], timeout = 20)
    if r.return_code != 0:
        return []
    return [l.strip() for l in r.stdout.splitlines() if l.strip()]

def _find_library(ctx, name, spec, root, site_packages):
    """Returns struct(source, include, libdir, files), or struct(source = None, why = ...)."""
    override = ctx.os.environ.get(spec.env, "") if name != "cudart" else ""
    if override:
        found = _find_in_prefix(ctx, spec, override)
        if type(found) == "string":
            fail("%s=%s: %s" % (spec.env, override, found))
        return struct(source = spec.env, include = found.include, libdir = found.libdir, files = found.files)
    candidates = [("toolkit", _join(root, sub)) for sub in spec.toolkit]
    if spec.system:
        candidates.append(("system", "/usr"))
    for sp in site_packages:
        candidates += [("wheel", sp + "/nvidia/" + w) for w in spec.wheels]
    tried = []
    for source, prefix in candidates:
        if not ctx.path(prefix).exists:
            continue
        found = _find_in_prefix(ctx, spec, prefix)
        if type(found) != "string":
            return struct(source = source, include = found.include, libdir = found.libdir, files = found.files)
        tried.append(found)
    return struct(source = None, why = "; ".join(tried) if tried else "no candidate directory exists")

def _find_toolkit(ctx):
    """Returns the toolkit's directory as given ($CUDA_PATH or /usr/local/cuda), or None."""
    candidates = []
    if ctx.os.environ.get("CUDA_PATH"):
        candidates.append(ctx.os.environ["CUDA_PATH"].rstrip("/"))
    candidates.append("/usr/local/cuda")
    for c in candidates:
        if ctx.path(c + "/bin/nvcc").exists:
            return c
    return None

def _library_build(name, spec, found, include_names):
    """Returns the cc_library for one found library."""
    hdrs = []
    includes = []
    if found.include not in _SYSTEM_INCLUDE_DIRS:
        d = include_names[found.include]
        hdrs = [d + "/" + g for g in spec.hdrs]
        includes = [d]
    linkopts = []
    if found.libdir not in _SYSTEM_LIB_DIRS:
        linkopts = ["-L" + found.libdir, "-Wl,-rpath," + found.libdir]
    linkopts.append("-Wl,-rpath,$$ORIGIN/../lib")
    for f in found.files:
        linkopts.append("-l" + f[3:-3] if f.endswith(".so") else "-l:" + f)
    return """# {name}: {source}, headers in {include}, {files} in {libdir}
cc_library(
    name = "{name}",
    hdrs = glob({hdrs}, allow_empty = True),
    includes = {includes},
    linkopts = {linkopts},
    deps = {deps},
)
""".format(
        name = name,
        source = found.source,
        include = found.include,
        files = ", ".join(found.files),
        libdir = found.libdir,
        hdrs = repr(hdrs),
        includes = repr(includes),
        linkopts = repr(linkopts),
        deps = repr([] if name == "cudart" else [":cudart"]),
    )

def _write_without_cuda(ctx, why, report):
    build = ['package(default_visibility = ["//visibility:public"])', "", _INCOMPATIBLE_BUILD]
    ctx.file("defs.bzl", 'HAVE_CUDA = False\nNVCC = ""\nCUDA_ROOT = ""\nCUDA_ONLY = ["%s"]\nCUDA_LIBS = {}\n' % _INCOMPATIBLE)
    for name in _LIBS:
        build.append('cc_library(name = "%s", target_compatible_with = ["%s"])' % (name, _INCOMPATIBLE))
    build.append('exports_files(["found.txt"])')
    ctx.file("BUILD", "\n".join(build) + "\n")
    ctx.file("found.txt", "CUDA off: %s\n%s" % (why, "".join([l + "\n" for l in report])))

def _cuda_configure_impl(ctx):
    root = _find_toolkit(ctx)
    if root == None:
        _write_without_cuda(ctx, "no bin/nvcc in $CUDA_PATH or /usr/local/cuda", [])
        return

    site_packages = _site_packages(ctx)
    found = {}
    report = ["toolkit: %s (nvcc %s/bin/nvcc)" % (root, root)]
    for name, spec in _LIBS.items():
        f = _find_library(ctx, name, spec, root, site_packages)
        found[name] = f
        if f.source == None:
            report.append("%s: not found (%s)" % (name, f.why))
        else:
            report.append("%s: %s, include %s, %s in %s" % (name, f.source, f.include, ", ".join(f.files), f.libdir))
    missing = [n for n in _REQUIRED if found[n].source == None]
    if missing:
        why = "%s not found" % ", ".join(missing)
        print("@local_cuda: CUDA targets are skipped: %s (see found.txt)" % why)
        _write_without_cuda(ctx, why, report)
        return

    # One symlink per distinct include directory: the toolkit's is "include", as it always was.
    include_names = {}
    if found["cudart"].include not in _SYSTEM_INCLUDE_DIRS:
        include_names[found["cudart"].include] = "include"
    for name in _LIBS:
        f = found[name]
        if f.source != None and f.include not in _SYSTEM_INCLUDE_DIRS and f.include not in include_names:
            include_names[f.include] = name + "_include"
    for path, link in include_names.items():
        ctx.symlink(path, link)

    build = ['package(default_visibility = ["//visibility:public"])', "", _INCOMPATIBLE_BUILD]
    build.append("# What was found where (also in found.txt):\n" + "".join(["#   " + l + "\n" for l in report]))
    libs = {}
    for name, spec in _LIBS.items():
        f = found[name]
        if f.source == None:
            build.append('# %s: not found\ncc_library(name = "%s", target_compatible_with = ["%s"])\n' % (name, name, _INCOMPATIBLE))
            continue
        build.append(_library_build(name, spec, f, include_names))
        libs[name] = {"source": f.source, "include": f.include, "libdir": f.libdir, "libs": f.files}
    build.append('exports_files(["found.txt"])')
    ctx.file("BUILD", "\n".join(build) + "\n")
    ctx.file("found.txt", "".join([l + "\n" for l in report]))
    # nvcc by its resolved path: it names the compiler that built the objects, and keeps their
    # cache keys as they were before this rule stopped resolving the toolkit's directory.
    ctx.file("defs.bzl", "HAVE_CUDA = True\nNVCC = %r\nCUDA_ROOT = %r\nCUDA_ONLY = []\nCUDA_LIBS = %r\n" % (
        str(ctx.path(root + "/bin/nvcc").realpath),
        root,
        libs,
    ))

cuda_configure = repository_rule(
    implementation = _cuda_configure_impl,
    environ = ["CUDA_PATH", "CUPTI_PATH", "CUDNN_PATH", "CUBLAS_PATH", "NCCL_PATH"],
    local = True,
)
