// Attention's two products in vitpe's own AVX-512 register tiles, for inference on one
// (batch, head) pair at a time: the logits of a block of query rows against every key land in
// a small block that stays in L1 while the softmax turns them into exponentials (normalised at
// the end, per output row) and the tiles multiply them by v. The logits' tile scales them, adds
// the bias and mask and keeps each row's maximum while its sums are still in registers, so the
// softmax reads the block once.
//
// oneDNN's sgemm, which the training forward and the other ISAs use, packs both operands on
// every call; at attention's sizes (197 x 197 x 64 for ViT, 49 x 49 x 32 for Swin's windows)
// that packing and its call overhead kept the whole op near half of the FMA peak. Here the keys
// are transposed once per pair (16 x 16 in registers) and the values copied into panels that the
// tiles stream through; the queries are read where they are. Every row's sums run over the head
// dimension (logits) and the keys (outputs) in their natural order whatever block the row falls in,
// so the bits do not depend on how the rows were shared between threads.
#pragma once

#include <cstdint>

namespace vitpe::cpu {

// Query rows per block: the logits block (kAttentionRowBlock x keys) stays in L1.
constexpr int64_t kAttentionRowBlock = 12;

// Whether the tiles take this head dimension (a multiple of 16) on this CPU (AVX-512).
bool attention_tiles_take(int64_t hd);

// The keys' count rounded up to the tiles' 16 columns: the row length of the packed keys and of
// the logits block.
inline int64_t attention_tiles_keys(int64_t n) { return (n + 15) / 16 * 16; }

// Floats of the packed keys and values of n keys of head dimension hd.
inline int64_t attention_tiles_packed(int64_t n, int64_t hd) {
  return attention_tiles_keys(n) * hd + n * hd;
}

// Packs one pair's n keys and values (rows of hd floats, ldk and ldv apart): kt holds the keys'
// transpose [hd, attention_tiles_keys(n)] (zero past n) and vp the values, each cut into panels
// of 32 columns stored one after the other.
void attention_pack(float* kt, float* vp, const float* k, int64_t ldk, const float* v, int64_t ldv,
                    int64_t n, int64_t hd);

// For m query rows (ldq apart) against n keys and values packed by attention_pack:
// out = softmax(q k^T * scale + bias + mask) v, rows ldo apart. bias and mask: the m rows' own
// rows of n (ldb and ldm apart), or null. s: kAttentionRowBlock * attention_tiles_keys(n)
// floats of work space.
void attention_tiles_rows(float* out, int64_t ldo, const float* q, int64_t ldq, const float* kt,
                          const float* vp, int64_t m, int64_t n, int64_t hd, float scale,
                          const float* bias, int64_t ldb, const float* mask, int64_t ldm, float* s);

}  // namespace vitpe::cpu
