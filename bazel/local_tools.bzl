"""Finds the system's protoc, grpc_cpp_plugin and grpc_python_plugin; exposes them as
@local_tools//:NAME."""

_TOOLS = ["protoc", "grpc_cpp_plugin", "grpc_python_plugin"]

def _local_tools_impl(ctx):
    build = ['package(default_visibility = ["//visibility:public"])']
    for tool in _TOOLS:
        path = ctx.which(tool)
        if path == None:
            fail("%s not found on PATH: install protobuf-compiler and protobuf-compiler-grpc " % tool +
                 "(./headroom does this on a fresh machine)")
        ctx.symlink(path, tool)
        build.append('exports_files(["%s"])' % tool)
    ctx.file("BUILD", "\n".join(build) + "\n")

local_tools = repository_rule(
    implementation = _local_tools_impl,
    environ = ["PATH"],
    local = True,
)
