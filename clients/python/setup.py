"""Builds headroom_client with headroom_client._proto generated from proto/headroom.proto.

The package's metadata is in pyproject.toml; this file only adds the stubs to the build:
build_py runs generate_stubs.sh (system protoc and grpc_python_plugin, as Bazel's
//clients/python:stubs does) into the build directory, so the installed package has them
and the source tree is left as it was. PROTO, PROTOC and GRPC_PYTHON_PLUGIN override the
.proto file and the tools, as for generate_stubs.sh.
"""

import os
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))


class BuildPyWithStubs(build_py):
    """build_py, then the generated stubs into <build_lib>/headroom_client/_proto."""

    def run(self):
        super().run()
        proto = os.environ.get("PROTO", os.path.join(HERE, "..", "..", "proto", "headroom.proto"))
        if not os.path.isfile(proto):
            raise SystemExit(
                f"headroom_client: {proto} not found; build from a Headroom checkout "
                "(clients/python beside proto/), or set PROTO to proto/headroom.proto")
        out = os.path.join(self.build_lib, "headroom_client", "_proto")
        env = dict(os.environ, PROTO=proto)
        subprocess.run(["bash", os.path.join(HERE, "generate_stubs.sh"), out], check=True, env=env,
                       stdout=subprocess.DEVNULL)


setup(cmdclass={"build_py": BuildPyWithStubs})
