"""C++ code generation from .proto files with the system protoc and grpc_cpp_plugin."""

load("@rules_cc//cc:defs.bzl", "cc_library")

def cc_grpc_proto_library(name, src, deps = [], grpc = True, visibility = None):
    """Generates C++ messages (and gRPC stubs when grpc is True) for one .proto file.

    Args:
      name: the cc_library to create; headers are included as "<package>/<base>.pb.h" and
        "<package>/<base>.grpc.pb.h".
      src: the .proto file, in this package.
      deps: cc_grpc_proto_library targets whose protos `src` imports.
      grpc: also generate the service stubs.
      visibility: of the cc_library.
    """
    base = src[:-len(".proto")]
    outs = [base + ".pb.h", base + ".pb.cc"]
    cmd = "$(location @local_tools//:protoc) -I. --cpp_out=$(GENDIR)"
    tools = ["@local_tools//:protoc"]
    if grpc:
        outs += [base + ".grpc.pb.h", base + ".grpc.pb.cc"]
        cmd += (" --plugin=protoc-gen-grpc=$(location @local_tools//:grpc_cpp_plugin)" +
                " --grpc_out=$(GENDIR)")
        tools.append("@local_tools//:grpc_cpp_plugin")
    native.genrule(
        name = name + "_codegen",
        srcs = [src] + [d + "_srcs" for d in deps],
        outs = outs,
        cmd = cmd + " $(location %s)" % src,
        tools = tools,
    )
    native.filegroup(
        name = name + "_srcs",
        srcs = [src] + [d + "_srcs" for d in deps],
        visibility = visibility,
    )
    cc_library(
        name = name,
        srcs = [o for o in outs if o.endswith(".cc")],
        hdrs = [o for o in outs if o.endswith(".h")],
        deps = deps + ["@system//:protobuf"] + (["@system//:grpc"] if grpc else []),
        visibility = visibility,
    )
