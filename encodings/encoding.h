// The three interfaces of positional encodings (one per site), and the factory that turns a spec
// string ("sincos2d", "learned1d+relbias", "rope-mixed:theta=10") into them.
//
// - TokenEncoding: the input site, one per model. Adds a position signal to the token
//   sequence [B, prefix + rows*cols, D] (prefix tokens such as the class token come first).
// - AttentionEncoding: the attention site, one per block. Adds a bias [H, N, N] to the
//   attention logits and/or rotates q and k, for sequences of prefix + Mh*Mw tokens where
//   Mh x Mw is the attention window (the whole grid in ViT, a window in Swin).
// - ConditionalEncoding: the conditional site, once per model after a chosen block (CPVT's
//   PEG). Its signal is computed from the tokens themselves, so it changes them in place and
//   its backward changes their gradient too; it works at any grid without an extension rule.
//
// Models ask the factory for the parts and never switch on the kind. Grids are rows x cols,
// tokens row-major. In Swin's shifted windows the window-local grid is used: every pair of
// tokens that the shift mask lets attend to each other is contiguous in the image, so its
// relative offset equals the local one, and bias and rotation (which depend only on relative
// offsets between attending tokens) come out as with true image coordinates.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "vitpe/ops/attention_terms.h"
#include "vitpe/ops/random.h"
#include "vitpe/ops/tensor.h"

namespace vitpe {

// How a kind meets a grid other than the one it was built (trained) for:
//   interpolate  its tables are resampled to the new grid (coordinates rescaled to the old range)
//   extrapolate  integer coordinates run past the trained range (fixed formulas, distances)
//   centre       as extrapolate, with the built grid placed at the centre of the new one
//                (absolute kinds; relative ones cannot tell it from extrapolate)
//   ntk          each frequency between the two (integer-coordinate frequency kinds, see below)
//   none         nothing depends on the grid
enum class ExtensionRule : uint8_t { none, interpolate, extrapolate, centre, ntk };
const char* rule_name(ExtensionRule e);  // "none", "interpolate", "extrapolate", "centre", "ntk"

// The rule an evaluation asks for (`vitpe eval|compare --policy`): each kind's own rule
// (`native`, what training and inference use by default), or one rule for every kind whose
// numbers depend on the grid. For a part built for grid G (rows R0 x C0) met on grid R x C:
//   interpolate  coordinates are rescaled into the built range, y R0/R and x C0/C: learned
//                tables resampled (today's learned1d, separable2d, relbias), sin-cos and RoPE
//                angles of the scaled coordinates (timm's ref_feat_shape), ALiBi distances
//                scaled per axis, cpb offsets normalised by the new window;
//   extrapolate  integer coordinates past the built range: fixed formulas and learned
//                frequencies as they are, learned tables hold their edge values (absolute
//                tables repeat the last row/column, relative tables clamp the offset to the
//                largest one trained), cpb offsets normalised by the built window.
//   centre       extrapolate anchored at the centre: the absolute kinds (learned1d,
//                separable2d, sincos2d) place the built grid at row and column centre_offset() of
//                the new one (its middle part when the new one is smaller), their
//                values there unchanged, learned tables holding their edges on every side and
//                sincos2d's coordinates running past them on both sides (negative before it).
//                Relative kinds see only offsets, which an anchor does not change: extrapolate.
//   ntk          NTK-aware frequency scaling (as long-context language models scale RoPE), for
//                the kinds whose angles are integer coordinates times a ladder of frequencies
//                (rope-axial, rope-mixed, sincos2d): frequency k of the n on an axis (k = 0 the
//                highest, as initialised) meets an axis s times the built one with its
//                coordinate scaled by s^(-k/(n-1)) (ntk_scale): the highest frequency keeps
//                integer coordinates (extrapolates), the lowest is interpolated (1/s), and those
//                between are scaled geometrically, which for a fixed ladder equals raising the
//                base theta to theta s^(n/(n-1)). Every other kind takes its native rule.
// Kinds with no grid-dependent part (none, peg) ignore it.
enum class ExtensionPolicy : uint8_t { native, interpolate, extrapolate, centre, ntk };
// "native", "interpolate", "extrapolate", "centre", "ntk"
const char* policy_name(ExtensionPolicy p);
// "native" | "interpolate" | "extrapolate" | "centre" | "ntk" (also "interp", "extrap",
// "center") -> the policy; throws std::invalid_argument naming the accepted words otherwise.
ExtensionPolicy parse_policy(const std::string& word);
// What a kind can do beyond interpolation and extrapolation: anchor an absolute table at the
// centre, scale a ladder of frequencies (ntk).
struct RuleAbilities {
  bool absolute = false;     // centre is its own rule (else it equals extrapolate)
  bool frequencies = false;  // ntk is its own rule (else the native rule)
};
// The rule in effect for a kind whose own rule is `native` under policy p.
ExtensionRule resolve_rule(ExtensionPolicy p, ExtensionRule native, RuleAbilities can = {});
// centre's anchor on an axis of `size` cells for a table built with `built`: the built index 0
// sits at this index, (size - built) / 2 rounded toward zero (negative when smaller: the
// middle part is kept), as resample_hold_edges(centred) places it.
inline int64_t centre_offset(int64_t built, int64_t size) { return (size - built) / 2; }
// ntk's coordinate factor for frequency k of n (k = 0 the highest) on an axis s times the built
// one: s^(-k/(n-1)); 1 for n == 1 (the highest frequency alone) and for s == 1.
double ntk_scale(int64_t k, int64_t n, double s);

struct Grid {
  int64_t rows = 0, cols = 0;
  int64_t count() const { return rows * cols; }
  bool operator==(const Grid& o) const { return rows == o.rows && cols == o.cols; }
  bool operator!=(const Grid& o) const { return !(*this == o); }
  std::string str() const { return std::to_string(rows) + "x" + std::to_string(cols); }
};

// A learned tensor: its value, its gradient (same shape, accumulated by backward), the name
// it has in a checkpoint (relative to its owner, e.g. "pos_embed" or
// "attn.relative_position_bias_table"), and whether AdamW should skip weight decay for it.
struct Param {
  std::string name;
  Tensor value;
  Tensor grad;
  bool no_decay = false;
};

// What token and attention parts share: the extension policy each follows on a grid other than
// the one it was built for, and the rule that policy puts in effect. Changing the policy calls
// policy_changed(), where a part drops the tables it derived for other grids; learned values are
// not changed.
class EncodingPart {
 public:
  virtual ~EncodingPart() = default;
  void set_extension_policy(ExtensionPolicy p) {
    if (p == policy_) return;
    policy_ = p;
    policy_changed();
  }
  ExtensionPolicy extension_policy() const { return policy_; }
  // The rule in effect under the current policy (none for kinds without a grid-dependent part).
  virtual ExtensionRule extension_rule() const { return ExtensionRule::none; }
  // Training-time augmentation of the coordinates (rope-dinov3's shift, jitter and rescale): a
  // training step hands every part the seed of its draw before the forward and takes it back
  // (nullopt) after the backward, so that evaluation never sees it. A pure function of the seed:
  // a resumed run draws what the uninterrupted one drew. Kinds without augmentation ignore it.
  void set_augmentation(std::optional<uint64_t> seed) {
    if (seed == augmentation_) return;
    augmentation_ = seed;
    augmentation_changed();
  }
  std::optional<uint64_t> augmentation() const { return augmentation_; }
  // Whether this part augments at all when given a seed (its options ask for it).
  virtual bool augments() const { return false; }

 protected:
  virtual void policy_changed() {}
  virtual void augmentation_changed() {}
  ExtensionPolicy policy_ = ExtensionPolicy::native;
  std::optional<uint64_t> augmentation_;
};

class TokenEncoding : public EncodingPart {
 public:
  virtual ~TokenEncoding() = default;
  virtual std::string kind() const = 0;

  // tokens: [B, prefix + grid.count(), D], modified in place (tokens += PE). `grid` may differ
  // from the grid the encoding was built for: the encoding is then resampled to it (computed
  // once per grid and cached; learned values are not changed).
  virtual void forward(Tensor& tokens, Grid grid) = 0;
  // dtokens: [B, prefix + grid.count(), D]; accumulates into the parameters' gradients.
  // (The gradient with respect to the tokens passes through unchanged.)
  virtual void backward(const Tensor& dtokens, Grid grid) = 0;

  // Replace the learned tables by their resampled versions for a new grid (fine-tuning at a
  // new resolution, converting checkpoints). Fixed kinds only change their grid.
  virtual void resample(Grid new_grid) = 0;
  virtual Grid grid() const = 0;

  // The encoding as a table [prefix + grid.count(), D] (for pictures and tests).
  virtual Tensor table(Grid grid) = 0;

  virtual std::vector<Param*> params() = 0;
};

// A position signal computed from the tokens: tokens [B, prefix + grid.count(), D] become
// f(tokens) in place (the prefix tokens pass unchanged), after block after_block() of the model
// (0: on the encoded tokens before the first block).
class ConditionalEncoding {
 public:
  virtual ~ConditionalEncoding() = default;
  virtual std::string kind() const = 0;
  virtual int64_t after_block() const = 0;

  // tokens: [B, prefix + grid.count(), D], modified in place; keeps the input for backward.
  virtual void forward(Tensor& tokens, Grid grid) = 0;
  // dtokens: [B, prefix + grid.count(), D], the gradient of the output of the last forward, in
  // place: becomes the gradient of its input. Accumulates into the parameters' gradients.
  virtual void backward(Tensor& dtokens, Grid grid) = 0;

  virtual std::vector<Param*> params() = 0;
};

// Where the attention of one block happens: prefix tokens (no 2D position) followed by the
// window's tokens in row-major order.
struct AttnGeometry {
  Grid window;
  int64_t prefix = 0;
  int64_t tokens() const { return prefix + window.count(); }
};

class AttentionEncoding : public EncodingPart {
 public:
  virtual ~AttentionEncoding() = default;
  virtual std::string kind() const = 0;

  virtual bool has_bias() const = 0;
  virtual bool has_rotation() const = 0;

  // bias: [H, N, N] with N = geom.tokens(); overwritten (not accumulated).
  virtual void bias(Tensor& bias, const AttnGeometry& geom) = 0;
  // dbias: [H, N, N]; accumulates into the parameters' gradients.
  virtual void bias_backward(const Tensor& dbias, const AttnGeometry& geom) = 0;

  // q, k: [B, H, N, hd] -> q_out, k_out (same shapes; may not alias the inputs). Prefix tokens
  // pass through unrotated.
  virtual void rotate(Tensor& q_out, Tensor& k_out, const Tensor& q, const Tensor& k,
                      const AttnGeometry& geom) = 0;
  // Inference: the same rotation of q and k in place, where the qkv projection wrote them
  // (qkv: [B, N, 3 D] with D = heads * head_dim, q in columns [0, D), k in [D, 2 D), head h at
  // h * head_dim; v is left alone), so attention reads the heads there as it does for every
  // other kind, with no copies between layouts. The default copies q and k out, calls rotate()
  // and writes them back; the rotary kinds turn them in place.
  virtual void rotate_qkv_rows(Tensor& qkv, int64_t heads, const AttnGeometry& geom);
  // dq_out, dk_out -> dq, dk (accumulated); accumulates the gradients of learned frequencies,
  // which need the unrotated q, k.
  virtual void rotate_backward(Tensor& dq, Tensor& dk, const Tensor& dq_out, const Tensor& dk_out,
                               const Tensor& q, const Tensor& k, const AttnGeometry& geom) = 0;

  // The encoding's terms for one geometry as data (ops/attention_terms.h: relative table,
  // distance slopes, rotation frequencies; CPU f32) for attention implementations that read
  // them in place (the CUDA kernel). Kinds without such terms return the geometry alone.
  virtual AttentionTerms terms(const AttnGeometry& geom);

  // Replace learned tables by their resampled versions for a new window (relbias). The default,
  // for kinds without tables, only checks the window: they take it from each call's geometry.
  virtual void resample(Grid new_window);

  virtual std::vector<Param*> params() = 0;
};

// Where an encoding kind works: nowhere (`none`), on the tokens before the first block, in every
// block's attention, or computed from the tokens after a block (conditional).
enum class EncodingSite : uint8_t { none, token, attention, conditional };
const char* site_name(EncodingSite s);  // "-", "token", "attention", "conditional"

// A parsed spec: one part per site at most ("learned1d+relbias", "peg+relbias"), each with its
// options. Made from its text (parse_encoding), so `config.encoding = "relbias"` parses.
struct EncodingSpec {
  struct Part {
    std::string kind;
    std::vector<std::pair<std::string, std::string>> options;  // as written, validated
    bool operator==(const Part&) const = default;
  };
  std::vector<Part> parts;

  EncodingSpec() = default;  // no parts: nothing parsed yet (models need a parsed spec)
  EncodingSpec(const std::string& text);  // parse_encoding(text)
  EncodingSpec(const char* text);
  std::string str() const;  // canonical form, e.g. "learned1d+relbias"
  // The part of kind `kind`, or of site `site`; nullptr when the spec has none.
  const Part* part(const std::string& kind) const;
  const Part* part(EncodingSite site) const;
  bool has(const std::string& kind) const { return part(kind) != nullptr; }
  bool operator==(const EncodingSpec&) const = default;
};

// Throws std::invalid_argument naming the unknown kind and listing the known ones, or the bad
// option and the accepted ones.
EncodingSpec parse_encoding(const std::string& spec);

// Builds the parts of a spec. Each function returns nullptr when the spec has no part of that
// site (e.g. make_attention_encoding for "sincos2d"). Learned values are initialised from rng.
// Throws std::invalid_argument when the dimensions do not suit the kind (sincos2d: dim % 4,
// rope: head_dim % 4, ...), naming the kind and the numbers.
std::unique_ptr<TokenEncoding> make_token_encoding(const EncodingSpec& spec, int64_t dim, Grid grid,
                                                   int64_t prefix, Rng& rng);
std::unique_ptr<AttentionEncoding> make_attention_encoding(const EncodingSpec& spec, int64_t heads,
                                                           int64_t head_dim, Grid window,
                                                           int64_t prefix, Rng& rng);
std::unique_ptr<ConditionalEncoding> make_conditional_encoding(const EncodingSpec& spec,
                                                               int64_t dim, Grid grid,
                                                               int64_t prefix, Rng& rng);

// How a model family attends: one attention over the whole grid (ViT) or within windows (Swin).
enum class AttentionLayout : uint8_t { global, windowed };

// The registry's entry for one kind, for `vitpe encodings list`, defaults and reports.
struct EncodingKindInfo {
  std::string name;
  EncodingSite site = EncodingSite::none;
  std::string options, summary;
  ExtensionRule extension = ExtensionRule::none;
  std::string extension_note;                           // what exactly happens on another grid
  bool studied_global = true, studied_windowed = true;  // in the default comparison of each layout
};
// Every kind, in the registry's order (the order of tables and default studies).
std::vector<EncodingKindInfo> encoding_kinds();
// The kinds a comparison runs by default for models of `layout`, in registry order.
std::vector<std::string> default_study_encodings(AttentionLayout layout);

}  // namespace vitpe
