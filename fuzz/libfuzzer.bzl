"""libfuzzer_binary: a libFuzzer target whose own sources are compiled by clang, instrumented,
and linked against the g++-built archives of everything else it needs.

The instrumented sources are compiled to objects that come before the archives on the link
line, so the linker takes them and never pulls the same source's g++ object from its
library's archive (which would define every symbol a second time); the archives supply the
rest (executor, oneDNN calls, the store's SQLite, gRPC's glue), uninstrumented. Both
compilers use the same libstdc++, so their objects mix. Each compile is a Bazel action,
cached like any other, so a test using the binary only runs it.
"""

_CLANG = "/usr/bin/clang++"

_COMPILE = [
    "-std=c++17",
    "-O1",
    "-gline-tables-only",
    "-fsanitize=fuzzer-no-link,address,undefined",
    "-fno-sanitize-recover=undefined",
    "-Wno-unused-command-line-argument",
]

def _libfuzzer_binary_impl(ctx):
    cc = cc_common.merge_cc_infos(cc_infos = [d[CcInfo] for d in ctx.attr.deps])
    compilation = cc.compilation_context
    flags = _COMPILE + ["-I.", "-I" + ctx.bin_dir.path]
    flags += ["-D" + d for d in compilation.defines.to_list()]

    # Step 1: compile the fuzzer and the instrumented sources (srcs' .cc files) with clang.
    objects = []
    for src in [f for f in ctx.files.srcs if f.extension == "cc"]:
        obj = ctx.actions.declare_file("%s_objs/%s.o" % (ctx.label.name, src.short_path[:-len(".cc")]))
        ctx.actions.run(
            executable = _CLANG,
            arguments = flags + ["-c", src.path, "-o", obj.path],
            inputs = depset([src], transitive = [compilation.headers]),
            outputs = [obj],
            mnemonic = "ClangFuzzCompile",
            progress_message = "Compiling %s with clang for libFuzzer" % src.short_path,
            use_default_shell_env = True,
        )
        objects.append(obj)

    # Step 2: the g++-built archives of every library, and the system libraries' flags.
    archives = []
    link_flags = []
    for linker_input in cc.linking_context.linker_inputs.to_list():
        for library in linker_input.libraries:
            archive = library.pic_static_library or library.static_library
            if archive != None:
                archives.append(archive)
        for flag in linker_input.user_link_flags:
            if flag not in link_flags:
                link_flags.append(flag)

    # Step 3: link; the archives as one group, so their order does not matter.
    binary = ctx.actions.declare_file(ctx.label.name)
    ctx.actions.run(
        executable = _CLANG,
        arguments = ["-fsanitize=fuzzer,address,undefined"] + [o.path for o in objects] +
                    ["-Wl,--start-group"] + [a.path for a in archives] + ["-Wl,--end-group"] +
                    link_flags + ["-lpthread", "-o", binary.path],
        inputs = objects + archives,
        outputs = [binary],
        mnemonic = "ClangFuzzLink",
        progress_message = "Linking libFuzzer target %s" % ctx.label,
        use_default_shell_env = True,
    )
    return [DefaultInfo(files = depset([binary]), executable = binary)]

libfuzzer_binary = rule(
    implementation = _libfuzzer_binary_impl,
    executable = True,
    doc = "A libFuzzer binary: srcs (the fuzzer and the sources to instrument) built by clang, " +
          "deps (cc libraries providing the rest, and srcs' headers) by the usual toolchain.",
    attrs = {
        # The fuzzer and the sources to instrument; of a generated group (a proto library's
        # _codegen) only the .cc files.
        "srcs": attr.label_list(allow_files = True),
        "deps": attr.label_list(providers = [CcInfo]),
    },
)
