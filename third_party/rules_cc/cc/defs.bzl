"""Re-exports Bazel 4's native C++ rules under the rules_cc names.

Debian's rules_cc is newer than Bazel 4 understands; this shim lets BUILD files load
@rules_cc//cc:defs.bzl and work unchanged on a newer Bazel with the real rules_cc.
"""

cc_binary = native.cc_binary
cc_library = native.cc_library
cc_test = native.cc_test
cc_import = native.cc_import
cc_proto_library = native.cc_proto_library
cc_toolchain = native.cc_toolchain
cc_toolchain_suite = native.cc_toolchain_suite
objc_library = native.objc_library
