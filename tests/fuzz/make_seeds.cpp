// Writes the seed corpora of the fuzz harnesses (tests/fuzz/corpus/HARNESS/): small valid inputs
// of every kind each reader accepts, so the fuzzers start from deep inside the formats instead of
// rediscovering them. Deterministic; `scripts/fuzz --make-seeds` runs it and the output is
// committed. Usage: vitpe_fuzz_seeds OUT_DIR
#include <zlib.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <opencv2/imgcodecs.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "ops/random.h"
#include "tests/jpeg_testing.h"
#include "vit/io/checkpoint.h"
#include "vit/io/safetensors.h"
#include "vit/train/data.h"

namespace fs = std::filesystem;
using namespace vitpe;

namespace {

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!f) throw std::runtime_error("cannot write " + path.string());
}

std::string read_bytes(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

Tensor ramp(Shape shape, float scale) {
  Tensor t = Tensor::zeros(shape);
  float* p = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = scale * static_cast<float>(i % 17 - 8);
  return t;
}

void safetensors_seeds(const fs::path& dir, const fs::path& source_dir) {
  save_safetensors((dir / "f32_scalar_and_matrix.safetensors").string(),
                   {{"a", ramp({2, 3}, 0.5f)}, {"s", ramp({}, 1.0f)}}, {{"format", "pt"}});
  save_safetensors((dir / "empty_tensor.safetensors").string(), {{"e", Tensor::zeros({0, 4})}});
  // F16, BF16 and I64 entries, which our writer does not produce: written by the official
  // safetensors library (tests/data/README.md).
  fs::copy_file(source_dir / "tests/data/official_writer.safetensors",
                dir / "official_writer.safetensors", fs::copy_options::overwrite_existing);
  // Hostile headers (docs/HARDENING.md), small: a shape past the array limit, many entries, a
  // duplicate key inside an entry, nesting past the depth limit, an F64 tensor.
  auto raw = [&](const std::string& name, const std::string& header, size_t data_bytes) {
    const uint64_t n = header.size();
    write_bytes(dir / name, std::string(reinterpret_cast<const char*>(&n), 8) + header +
                                std::string(data_bytes, '\0'));
  };
  std::string ones = "[1";
  for (int i = 0; i < 1100; ++i) ones += ",1";
  raw("long_shape.safetensors",
      "{\"w\":{\"dtype\":\"F32\",\"shape\":" + ones + "],\"data_offsets\":[0,4]}}", 4);
  std::string many = "{";
  for (int i = 0; i < 200; ++i) {
    many += i ? ",\"t" : "\"t";
    many += std::to_string(i) + "\":{\"dtype\":\"F16\",\"shape\":[1],";
    many += "\"data_offsets\":[" + std::to_string(2 * i) + "," + std::to_string(2 * i + 2) + "]}";
  }
  raw("many_entries.safetensors", many + "}", 400);
  raw("duplicate_key.safetensors",
      R"({"w":{"dtype":"F32","dtype":"F16","shape":[1],"data_offsets":[0,4]}})", 4);
  raw("deep.safetensors", "{\"a\":" + std::string(20, '[') + std::string(20, ']') + "}", 0);
  raw("f64.safetensors", R"({"d":{"dtype":"F64","shape":[2],"data_offsets":[0,16]}})", 16);
}

ModelConfig tiny_vit(const std::string& encoding, Pool pool) {
  ModelConfig c;
  c.name = "custom";
  c.img_rows = c.img_cols = 8;
  c.channels = 1;
  c.patch = 4;
  c.classes = 3;
  c.vit().dim = 8;
  c.vit().depth = 1;
  c.vit().heads = 2;
  c.vit().mlp_dim = 16;
  c.vit().pool = pool;
  c.vit().class_token = pool == Pool::cls;
  c.encoding = encoding;
  c.preprocess.mean = {0.5f};
  c.preprocess.std_dev = {0.25f};
  c.labels = {"a", "b", "c"};
  return c;
}

ModelConfig tiny_swin() {
  ModelConfig c = tiny_vit("relbias", Pool::avg);
  c.family = "swin";
  c.arch = SwinArch{};
  c.swin().dim = 8;
  c.img_rows = c.img_cols = 8;
  c.patch = 2;
  c.swin().window = 2;
  c.swin().depths = {2, 1};
  c.swin().stage_heads = {2, 4};
  c.swin().mlp_ratio = 2.0f;
  return c;
}

void checkpoint_seeds(const fs::path& dir) {
  const std::vector<std::pair<std::string, ModelConfig>> models = {
      {"vit_learned1d_cls", tiny_vit("learned1d", Pool::cls)},
      {"vit_sincos2d_avg", tiny_vit("sincos2d", Pool::avg)},
      {"vit_separable2d_relbias", tiny_vit("separable2d+relbias", Pool::cls)},
      {"vit_rope_mixed", tiny_vit("rope-mixed", Pool::avg)},
      {"vit_alibi2d", tiny_vit("alibi2d", Pool::cls)},
      {"swin_relbias", tiny_swin()},
  };
  for (const auto& [name, config] : models) {
    auto model = make_model(config, 7);
    const fs::path ours = dir / (name + ".safetensors");
    save_model(*model, ours.string());
    if (name == "vit_learned1d_cls" || name == "swin_relbias") {
      // The same tensors without our metadata: a timm state dict, detected from the names.
      const SafeTensorsFile st = SafeTensorsFile::open(ours.string());
      std::vector<std::pair<std::string, Tensor>> tensors;
      for (const std::string& n : st.names()) tensors.emplace_back(n, st.get(n));
      save_safetensors((dir / (name + "_timm_names.safetensors")).string(), tensors);
    }
  }
}

std::string spec_seed(uint8_t dims0, uint8_t grid, uint8_t other, uint8_t heads_prefix,
                      const std::string& spec) {
  return std::string{static_cast<char>(dims0), static_cast<char>(grid), static_cast<char>(other),
                     static_cast<char>(heads_prefix)} +
         spec;
}

void encoding_spec_seeds(const fs::path& dir) {
  // dims0 = 0x33: dim 8, head_dim 8; grid 0x15: 4x4; other 0x23: 6x6; 0x04: 2 heads, 1 prefix.
  const std::vector<std::string> specs = {"none",
                                          "learned1d",
                                          "sincos1d",
                                          "sincos1d:T=100",
                                          "separable2d",
                                          "separable2d:mode=concat",
                                          "sincos2d",
                                          "sincos2d:layout=timm,T=1000",
                                          "relbias",
                                          "rope-axial",
                                          "rope-axial:theta=10",
                                          "rope-mixed",
                                          "rope-mixed:theta=100",
                                          "alibi2d",
                                          "learned1d+relbias",
                                          "rope-mixed:theta=10+learned1d",
                                          "sincos2d+alibi2d"};
  int i = 0;
  for (const std::string& s : specs) {
    write_bytes(dir / ("spec_" + std::to_string(i++)), spec_seed(0x33, 0x15, 0x23, 0x04, s));
  }
}

// An IDX payload: magic 0 0 8 ndim, big-endian dims, bytes.
std::string idx_payload(const std::vector<uint32_t>& dims) {
  std::string s{0, 0, 8, static_cast<char>(dims.size())};
  size_t n = 1;
  for (uint32_t d : dims) {
    for (int shift = 24; shift >= 0; shift -= 8) s.push_back(static_cast<char>(d >> shift));
    n *= d;
  }
  for (size_t i = 0; i < n; ++i) s.push_back(static_cast<char>(i * 37));
  return s;
}

std::string gzip(const std::string& raw) {
  const fs::path tmp = fs::temp_directory_path() / "vitpe-seed.gz";
  gzFile gz = gzopen(tmp.c_str(), "wb9");
  if (gz == nullptr || gzwrite(gz, raw.data(), static_cast<unsigned>(raw.size())) <= 0 ||
      gzclose(gz) != Z_OK) {
    throw std::runtime_error("cannot gzip a seed");
  }
  std::string out = read_bytes(tmp);
  fs::remove(tmp);
  return out;
}

void idx_seeds(const fs::path& dir) {
  // First byte: bit 0 = compress in the harness, bit 1 = 3 dimensions (fuzz_idx.cpp).
  write_bytes(dir / "labels_plain", std::string{1} + idx_payload({5}));
  write_bytes(dir / "images_plain", std::string{3} + idx_payload({2, 3, 4}));
  write_bytes(dir / "labels_gzip", std::string{0} + gzip(idx_payload({5})));
  write_bytes(dir / "images_gzip", std::string{2} + gzip(idx_payload({2, 3, 4})));
}

void image_seeds(const fs::path& dir) {
  cv::Mat gray(5, 7, CV_8UC1), bgr(6, 4, CV_8UC3), bgra(3, 9, CV_8UC4), deep(4, 4, CV_16UC3);
  cv::randu(gray, 0, 256);
  cv::randu(bgr, 0, 256);
  cv::randu(bgra, 0, 256);
  cv::randu(deep, 0, 65536);
  const std::vector<std::pair<std::string, const cv::Mat*>> images = {
      {"gray.png", &gray}, {"rgb.png", &bgr},   {"rgba.png", &bgra},  {"rgb16.png", &deep},
      {"rgb.jpg", &bgr},   {"gray.jpg", &gray}, {"rgb.bmp", &bgr},    {"gray.pgm", &gray},
      {"rgb.ppm", &bgr},   {"rgb.webp", &bgr},  {"rgb16.tif", &deep}, {"rgb.tif", &bgr}};
  for (const auto& [name, mat] : images) {
    if (!cv::imwrite((dir / name).string(), *mat)) {
      throw std::runtime_error("OpenCV cannot write " + name);
    }
  }
  auto bytes_of = [](const std::vector<uint8_t>& v) { return std::string(v.begin(), v.end()); };
  // JPEGs libjpeg makes and OpenCV does not: CMYK, progressive, one scan per component,
  // arithmetic coding, restart markers.
  cv::Mat rgb(24, 40, CV_8UC3), cmyk(16, 16, CV_8UC4);
  cv::randu(rgb, 0, 256);
  cv::randu(cmyk, 0, 256);
  const cv::Mat flat_gray(16, 16, CV_8UC1, cv::Scalar(90));  // tiny scans: a small bomb
  using testing::JpegOptions;
  write_bytes(dir / "cmyk_progressive.jpg",
              bytes_of(testing::encode_jpeg(
                  cmyk, {.jpeg_space = JCS_CMYK, .h0 = 1, .v0 = 1, .progressive = true})));
  write_bytes(dir / "ycck.jpg", bytes_of(testing::encode_jpeg(cmyk, {.jpeg_space = JCS_YCCK})));
  write_bytes(dir / "progressive.jpg",
              bytes_of(testing::encode_jpeg(rgb, {.progressive = true, .quality = 50})));
  write_bytes(dir / "scan_per_component.jpg",
              bytes_of(testing::encode_jpeg(rgb, {.scan_per_component = true, .quality = 50})));
  write_bytes(dir / "arithmetic_restarts.jpg",
              bytes_of(testing::encode_jpeg(rgb, {.arithmetic = true, .restart_rows = 1})));
  // Hostile ones (docs/HARDENING.md): a cut file, a scan bomb past the scan limit (kept small),
  // a frame claiming 8192 x 8192 over a few hundred bytes of data.
  const std::vector<uint8_t> whole = testing::encode_jpeg(rgb, {.quality = 95});
  write_bytes(dir / "cut.jpg", bytes_of(whole).substr(0, whole.size() / 2));
  const std::vector<uint8_t> two = testing::encode_jpeg(
      flat_gray, {.jpeg_space = JCS_GRAYSCALE, .h0 = 1, .v0 = 1, .dc_then_ac = true});
  write_bytes(dir / "scan_bomb.jpg", bytes_of(testing::repeat_scan(two, 1, 120)));
  std::vector<uint8_t> claims = whole;
  for (size_t at = 2; at + 9 < claims.size();
       at += 2 + (size_t{claims[at + 2]} << 8 | claims[at + 3])) {
    if (claims[at + 1] == 0xC0) {
      claims[at + 5] = claims[at + 7] = 0x20;
      claims[at + 6] = claims[at + 8] = 0x00;
      break;
    }
  }
  write_bytes(dir / "claims_8192.jpg", bytes_of(claims));
  // TIFFs whose tags decide the decode's memory: a 1 x 1 image with one 16384 x 16384 tile, and
  // float samples (both refused from the header); a valid tiled file.
  auto tiff = [](const std::vector<std::array<uint32_t, 4>>& tags, const std::string& data) {
    std::string b = {'I', 'I', 42, 0, 8, 0, 0, 0};
    auto put = [&](uint32_t v, int n) {
      for (int i = 0; i < n; ++i) b += static_cast<char>(v >> (8 * i));
    };
    put(static_cast<uint32_t>(tags.size()), 2);
    for (const auto& t : tags) {
      put(t[0], 2);
      put(t[1], 2);
      put(t[2], 4);
      put(t[3], 4);
    }
    put(0, 4);
    return b + data;
  };
  const uint32_t data_at = 8 + 2 + 12 * 10 + 4;
  // Tiles of PackBits literal runs (a count byte, then up to 128 bytes): OpenCV's in-memory
  // decode refuses uncompressed tiles.
  auto tiled = [&](uint32_t side, uint32_t tile, uint32_t tile_bytes) {
    return std::vector<std::array<uint32_t, 4>>{
        {256, 4, 1, side},    {257, 4, 1, side},      {258, 3, 1, 8},    {259, 3, 1, 32773},
        {262, 3, 1, 1},       {277, 3, 1, 1},         {322, 4, 1, tile}, {323, 4, 1, tile},
        {324, 4, 1, data_at}, {325, 4, 1, tile_bytes}};
  };
  std::string runs;
  for (int i = 0; i < 2; ++i) runs += '\x7f' + std::string(128, static_cast<char>(0x40 + i));
  write_bytes(dir / "tiled.tif", tiff(tiled(16, 16, 258), runs));
  write_bytes(dir / "huge_tile.tif", tiff(tiled(1, 16384, 258), runs));
  write_bytes(dir / "float.tif", tiff({{256, 4, 1, 4},
                                       {257, 4, 1, 4},
                                       {258, 3, 1, 32},
                                       {262, 3, 1, 1},
                                       {273, 4, 1, 8 + 2 + 12 * 6 + 4},
                                       {339, 3, 1, 3}},
                                      std::string(64, '\0')));
  // An animated WebP's extended header (refused by name).
  write_bytes(dir / "animated.webp",
              std::string("RIFF\x1e\0\0\0WEBPVP8X\x0a\0\0\0\x02\0\0\0\x09\0\0\x09\0\0", 30));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: vitpe_fuzz_seeds OUT_DIR (writes OUT_DIR/HARNESS/...)\n";
    return 2;
  }
  try {
    const fs::path out = argv[1];
    const fs::path source_dir = VITPE_SOURCE_DIR;
    for (const char* h : {"safetensors", "checkpoint", "encoding_spec", "idx", "image"}) {
      fs::remove_all(out / h);
      fs::create_directories(out / h);
    }
    safetensors_seeds(out / "safetensors", source_dir);
    checkpoint_seeds(out / "checkpoint");
    encoding_spec_seeds(out / "encoding_spec");
    idx_seeds(out / "idx");
    image_seeds(out / "image");
    std::cout << "seed corpora written under " << out.string() << "\n";
  } catch (const std::exception& e) {
    std::cerr << "vitpe_fuzz_seeds: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
