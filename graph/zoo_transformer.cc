// The zoo's GPT-2-style transformer, laid out and named as Hugging Face's GPT2Model
// ("wte.weight", "h.0.attn.c_attn.weight", ..., "ln_f.weight"), with the language-model head
// tied to the token embedding.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "graph/graph_builder.h"
#include "graph/zoo_internal.h"
#include "util/status_macros.h"

namespace headroom::graph::zoo_internal {
namespace {

// The validated sizes of one transformer.
struct TransformerConfig {
  int64_t batch;
  int64_t layers;
  int64_t d_model;
  int64_t heads;
  int64_t sequence;
  int64_t vocab;
  int64_t positions;
  int64_t d_ff;
  // For embeddings, attention probabilities and residual branches; GPT-2's is 0.1.
  double dropout;

  int64_t head_dim() const { return d_model / heads; }
};

// Returns the config of the resolved `options`, or InvalidArgument if d_model does not divide
// by heads or sequence exceeds positions.
absl::StatusOr<TransformerConfig> ConfigOf(int64_t batch, const ZooOptions& options) {
  TransformerConfig c{batch,
                      options.at("layers"),
                      options.at("d_model"),
                      options.at("heads"),
                      options.at("sequence"),
                      options.at("vocab"),
                      options.at("positions"),
                      options.at("d_ff"),
                      static_cast<double>(options.at("dropout_percent")) / 100.0};
  if (c.d_ff == 0) c.d_ff = 4 * c.d_model;
  if (c.d_model % c.heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("zoo model 'transformer': d_model ", c.d_model,
                     " is not divisible by heads ", c.heads));
  }
  if (c.dropout >= 1.0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zoo model 'transformer': dropout_percent ", options.at("dropout_percent"),
        " must be below 100"));
  }
  if (c.sequence > c.positions) {
    return absl::InvalidArgumentError(
        absl::StrCat("zoo model 'transformer': sequence ", c.sequence,
                     " exceeds positions ", c.positions, " (the rows of wpe)"));
  }
  return c;
}

// Returns Dropout(x) at the config's rate, or x itself when the rate is 0 (no node).
std::string Dropout(GraphBuilder& b, const std::string& name, const std::string& x,
                    const TransformerConfig& c) {
  return c.dropout > 0 ? AddDropout(b, name, x, c.dropout) : x;
}

// Hugging Face's Conv1D: x W + b with weight [in, out] (not transposed) and bias [out].
std::string Conv1D(GraphBuilder& b, const std::string& name, const std::string& x,
                   int64_t in_features, int64_t out_features) {
  return b.Op("MatMul", name,
              {x, b.Parameter(name + ".weight", {in_features, out_features}),
               b.Parameter(name + ".bias", {out_features})});
}

// h = Dropout(wte[tokens] + wpe[positions]): [B,T,D].
std::string Embeddings(GraphBuilder& b, const TransformerConfig& c) {
  const std::string tokens = b.Input("tokens", {c.batch, c.sequence}, proto::DTYPE_INT64);
  const std::string positions = b.Input("positions", {c.sequence}, proto::DTYPE_INT64);
  const std::string wte = b.Op(
      "Embedding", "wte", {tokens, b.Parameter("wte.weight", {c.vocab, c.d_model})});
  const std::string wpe = b.Op(
      "Embedding", "wpe", {positions, b.Parameter("wpe.weight", {c.positions, c.d_model})});
  return Dropout(b, "drop", b.Add("embeddings", wte, wpe), c);
}

// [B,T,D] -> [B,H,T,D/H]: "<x>.reshape" then "<x>.transpose".
std::string SplitHeads(GraphBuilder& b, const std::string& x, const TransformerConfig& c) {
  const std::string y = b.Op("Reshape", x + ".reshape", {x},
                             {{"shape", IntsAttr({c.batch, c.sequence, c.heads, c.head_dim()})}});
  return b.Op("Transpose", x + ".transpose", {y}, {{"perm", IntsAttr({0, 2, 1, 3})}});
}

// [B,H,T,D/H] -> [B,T,D]: "<prefix>.context.transpose" then "<prefix>.merge".
std::string MergeHeads(GraphBuilder& b, const std::string& prefix, const std::string& x,
                       const TransformerConfig& c) {
  const std::string y = b.Op("Transpose", prefix + ".context.transpose", {x},
                             {{"perm", IntsAttr({0, 2, 1, 3})}});
  return b.Op("Reshape", prefix + ".merge", {y},
              {{"shape", IntsAttr({c.batch, c.sequence, c.d_model})}});
}

// Causal multi-head self-attention "<prefix>" (e.g. "h.0.attn"): c_attn, split into q, k, v,
// scaled causal softmax of q k^T, dropout, times v, merged heads, c_proj, dropout.
std::string SelfAttention(GraphBuilder& b, const std::string& prefix, const std::string& x,
                          const TransformerConfig& c) {
  const int64_t d = c.d_model;
  const std::string qkv = Conv1D(b, prefix + ".c_attn", x, d, 3 * d);
  const std::vector<std::string> split =
      b.AddNode("Split", prefix + ".split", {qkv}, {prefix + ".q", prefix + ".k", prefix + ".v"},
                {{"axis", IntAttr(2)}, {"sizes", IntsAttr({d, d, d})}});
  const std::string q = SplitHeads(b, split[0], c);
  const std::string k = SplitHeads(b, split[1], c);
  const std::string v = SplitHeads(b, split[2], c);
  const std::string scores =
      b.Op("MatMul", prefix + ".scores", {q, k}, {{"transpose_b", BoolAttr(true)}});
  const std::string probs = b.Op(
      "Softmax", prefix + ".probs", {scores},
      {{"scale", FloatAttr(1.0 / std::sqrt(static_cast<double>(c.head_dim())))},
       {"causal", BoolAttr(true)}});
  const std::string context =
      b.Op("MatMul", prefix + ".context",
           {Dropout(b, prefix + ".attn_dropout", probs, c), v});
  const std::string out = Conv1D(b, prefix + ".c_proj", MergeHeads(b, prefix, context, c), d, d);
  return Dropout(b, prefix + ".resid_dropout", out, c);
}

// Feed-forward "<prefix>" (e.g. "h.0.mlp"): c_fc, GELU (tanh), c_proj, dropout.
std::string Mlp(GraphBuilder& b, const std::string& prefix, const std::string& x,
                const TransformerConfig& c) {
  std::string y = Conv1D(b, prefix + ".c_fc", x, c.d_model, c.d_ff);
  y = b.Op("GELU", prefix + ".act", {y}, {{"approximate", StringAttr("tanh")}});
  y = Conv1D(b, prefix + ".c_proj", y, c.d_ff, c.d_model);
  return Dropout(b, prefix + ".dropout", y, c);
}

// Pre-norm block "<block>" (e.g. "h.0"): x + attn(ln_1(x)), then that + mlp(ln_2(that)).
std::string Block(GraphBuilder& b, const std::string& block, const std::string& x,
                  const TransformerConfig& c) {
  const std::string attn =
      SelfAttention(b, block + ".attn", b.LayerNorm(block + ".ln_1", x, c.d_model), c);
  const std::string h = b.Add(block + ".add_1", x, attn);
  const std::string mlp = Mlp(b, block + ".mlp", b.LayerNorm(block + ".ln_2", h, c.d_model), c);
  return b.Add(block + ".add_2", h, mlp);
}

}  // namespace

absl::StatusOr<proto::GraphDef> BuildTransformer(int64_t batch, const ZooOptions& options) {
  ASSIGN_OR_RETURN(const TransformerConfig c, ConfigOf(batch, options));
  GraphBuilder b("transformer");
  std::string h = Embeddings(b, c);
  for (int64_t i = 0; i < c.layers; ++i) h = Block(b, absl::StrCat("h.", i), h, c);
  h = b.LayerNorm("ln_f", h, c.d_model);
  // The head is tied to the token embedding: logits = h wte^T, [B,T,vocab].
  const std::string logits =
      b.Op("MatMul", "lm_head", {h, "wte.weight"}, {{"transpose_b", BoolAttr(true)}});
  AddCrossEntropyLoss(b, logits, {c.batch, c.sequence});
  return b.Build();
}

}  // namespace headroom::graph::zoo_internal
