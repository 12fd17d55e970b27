// libFuzzer harness: the encoding spec parser and factory (encodings/encoding.h). The first four
// bytes choose small dimensions (token width, grid, prefix tokens, heads, head width); the rest
// is the spec text as a user types it after --encoding. A spec that parses is built for those
// dimensions and run once at its own grid and once at another (the resampling paths).
#include <cstddef>
#include <cstdint>
#include <string>

#include "encodings/encoding.h"
#include "fuzz_common.h"
#include "ops/random.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const int init = vitpe::fuzz::init_single_thread();
  (void)init;
  if (size < 4 || size > 4 + 512) return 0;
  const int64_t dim = 2 * (1 + data[0] % 16);  // 2..32: odd kinds' constraints get exercised
  const vitpe::Grid grid{1 + data[1] % 6, 1 + (data[1] / 6) % 6};
  const vitpe::Grid other{1 + data[2] % 7, 1 + (data[2] / 7) % 7};
  const int64_t prefix = data[3] % 3;
  const int64_t heads = 1 + (data[3] / 3) % 4;
  const int64_t head_dim = 2 * (1 + (data[0] / 16) % 8);
  const std::string text(reinterpret_cast<const char*>(data + 4), size - 4);

  vitpe::fuzz::expect_clean([&] {
    const vitpe::EncodingSpec spec = vitpe::parse_encoding(text);
    // The canonical form parses to itself.
    if (vitpe::parse_encoding(spec.str()).str() != spec.str()) {
      vitpe::fuzz::finding("str() does not parse back to the same spec", spec.str().c_str());
    }
    vitpe::Rng rng(1);
    if (auto token = vitpe::make_token_encoding(spec, dim, grid, prefix, rng)) {
      for (const vitpe::Grid g : {grid, other}) {
        vitpe::Tensor tokens = vitpe::Tensor::zeros({1, prefix + g.count(), dim});
        token->forward(tokens, g);
        token->backward(tokens, g);
        vitpe::fuzz::keep(static_cast<size_t>(token->table(g).numel()));
      }
      token->resample(other);
    }
    if (auto attn = vitpe::make_attention_encoding(spec, heads, head_dim, grid, prefix, rng)) {
      for (const vitpe::Grid g : {grid, other}) {
        const vitpe::AttnGeometry geom{g, prefix};
        const int64_t n = geom.tokens();
        if (attn->has_bias()) {
          vitpe::Tensor bias = vitpe::Tensor::zeros({heads, n, n});
          attn->bias(bias, geom);
          attn->bias_backward(bias, geom);
        }
        if (attn->has_rotation()) {
          const vitpe::Tensor q = vitpe::Tensor::zeros({1, heads, n, head_dim});
          vitpe::Tensor q_out = vitpe::Tensor::zeros({1, heads, n, head_dim});
          vitpe::Tensor k_out = vitpe::Tensor::zeros({1, heads, n, head_dim});
          attn->rotate(q_out, k_out, q, q, geom);
          vitpe::Tensor dq = vitpe::Tensor::zeros({1, heads, n, head_dim});
          vitpe::Tensor dk = vitpe::Tensor::zeros({1, heads, n, head_dim});
          attn->rotate_backward(dq, dk, q_out, k_out, q, q, geom);
        }
        vitpe::fuzz::keep(static_cast<size_t>(attn->terms(geom).prefix));
      }
      attn->resample(other);
    }
    if (auto cond = vitpe::make_conditional_encoding(spec, dim, grid, prefix, rng)) {
      for (const vitpe::Grid g : {grid, other}) {
        vitpe::Tensor tokens = vitpe::Tensor::zeros({1, prefix + g.count(), dim});
        cond->forward(tokens, g);
        cond->backward(tokens, g);
      }
    }
  });
  return 0;
}
