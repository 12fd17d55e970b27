// Image retrieval with the installed vitpe: embeds every image of a folder (Classifier::embed,
// unit vectors) and prints, for each, its nearest neighbours by cosine similarity. Usage:
// retrieval CHECKPOINT_OR_PRESET FOLDER [K]; e.g. retrieval vit_small_patch14_dinov2.safetensors
// photos/ 3 (with --preset's config beside it as timm's config.json, or a preset name alone).
#include <vitpe/vitpe.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <opencv2/imgcodecs.hpp>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: retrieval CHECKPOINT_OR_PRESET FOLDER [K]\n");
    return 2;
  }
  const int k = argc > 3 ? std::atoi(argv[3]) : 3;
  try {
    std::vector<std::string> paths;
    for (const auto& e : std::filesystem::directory_iterator(argv[2])) {
      if (e.is_regular_file() && vitpe::has_image_extension(e.path().string())) {
        paths.push_back(e.path().string());
      }
    }
    std::sort(paths.begin(), paths.end());
    if (paths.size() < 2) {
      std::fprintf(stderr, "retrieval: %s: expected at least two images\n", argv[2]);
      return 1;
    }
    // --- the README's example ---
    vitpe::Classifier model(argv[1]);
    std::vector<cv::Mat> images;
    for (const auto& p : paths) images.push_back(cv::imread(p, cv::IMREAD_UNCHANGED));
    const std::vector<std::vector<float>> v = model.embed(images, /*normalize=*/true);
    for (size_t q = 0; q < v.size(); ++q) {
      std::vector<std::pair<float, size_t>> scores;
      for (size_t i = 0; i < v.size(); ++i) {
        if (i == q) continue;
        float dot = 0;
        for (size_t j = 0; j < v[q].size(); ++j) dot += v[q][j] * v[i][j];
        scores.emplace_back(dot, i);
      }
      std::sort(scores.rbegin(), scores.rend());
      std::printf("%s\n", std::filesystem::path(paths[q]).filename().c_str());
      for (int r = 0; r < k && r < static_cast<int>(scores.size()); ++r) {
        std::printf("  %d. %s (cosine %.3f)\n", r + 1,
                    std::filesystem::path(paths[scores[r].second]).filename().c_str(),
                    scores[r].first);
      }
    }
    // --- end of the example ---
  } catch (const std::exception& e) {
    std::fprintf(stderr, "retrieval: %s\n", e.what());
    return 1;
  }
  return 0;
}
