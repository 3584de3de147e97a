#include "dist/collectives.h"

namespace headroom::dist {

const char* ReduceOpName(ReduceOp op) { return op == ReduceOp::kSum ? "sum" : "average"; }

}  // namespace headroom::dist
