// `headroom`: Headroom's command line (clients/cli.h).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "clients/cli.h"
#include "util/openmp_wait.h"

int main(int argc, char** argv) {
  headroom::RunWithPassiveOpenMpWait(argv);
  const headroom::clients::CommandIo io{std::cout, std::cerr, isatty(STDOUT_FILENO) != 0};
  const int code =
      headroom::clients::RunHeadroom(std::vector<std::string>(argv + 1, argv + argc), io);
  // Every command has closed its files and released its memory by now. Exit without the
  // libraries' static destructors: cuBLASLt's (linked for the CUDA backend, used or not)
  // walk its kernel tables and fault in 51 MB of its pages on the way out, which would make
  // even `headroom zoo` peak at 230 MB resident instead of 170 MB.
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(code);
}
