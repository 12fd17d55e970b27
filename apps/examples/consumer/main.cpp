// A vision application using the installed vitpe (find_package(vitpe), vitpe::vitpe): the
// README's example, classifying a cv::Mat in one call, plus checks that the installed headers,
// library and package version agree. Usage: consumer [CHECKPOINT_OR_PRESET [IMAGE]]; without
// arguments it classifies a gray square with the bundled checkpoint of the installed data folder.
#include <vitpe/vitpe.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <opencv2/imgcodecs.hpp>
#include <string>

// Whether this process was started with GOMP_SPINCOUNT=1000 (its initial environment, which
// restart_with_short_openmp_spin sets for the second start and then clears), or -1 when
// /proc/self/environ cannot be read.
int started_with_short_spin() {
  std::FILE* f = std::fopen("/proc/self/environ", "rb");
  if (f == nullptr) return -1;
  std::string env;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) env.append(buf, n);
  std::fclose(f);
  return env.find(std::string("GOMP_SPINCOUNT=1000") + '\0') != std::string::npos ? 1 : 0;
}

int main(int argc, char** argv) {
  // --- the README's example, first line ---
  vitpe::restart_with_short_openmp_spin(argv);
  // The second start cleared its marks; unless the user chose OpenMP's wait, it ran.
  const bool user_set = std::getenv("OMP_WAIT_POLICY") || std::getenv("GOMP_SPINCOUNT");
  if (std::getenv("VITPE_OMP_WAIT") != nullptr ||
      (!user_set && started_with_short_spin() == 0)) {
    std::printf("vitpe consumer: restart_with_short_openmp_spin did not start it again\n");
    return 1;
  }
  // Headers, library and package version file from one install agree.
  if (std::strcmp(vitpe::version(), VITPE_VERSION_STRING) != 0 ||
      std::strcmp(vitpe::version(), VITPE_PACKAGE_VERSION) != 0) {
    std::printf("vitpe consumer: version mismatch: library %s, headers %s, package %s\n",
                vitpe::version(), VITPE_VERSION_STRING, VITPE_PACKAGE_VERSION);
    return 1;
  }
  try {
    // --- the README's example ---
    const std::string model = argc > 1 ? argv[1] : vitpe::bundled_model();
    vitpe::Classifier classifier(model);
    const cv::Mat image = argc > 2 ? cv::imread(argv[2], cv::IMREAD_UNCHANGED)
                                   : cv::Mat(28, 28, CV_8UC1, cv::Scalar(128));
    const std::vector<vitpe::Prediction> top = classifier.classify(image, 3);
    for (const vitpe::Prediction& p : top) {
      std::printf("%-12s %5.1f%%\n", p.label.c_str(), 100 * p.probability);
    }
    // --- end of the example ---
    float total = 0;
    for (const vitpe::Prediction& p : top) total += p.probability;
    const bool ok = top.size() == 3 && std::isfinite(total) && total > 0 && total <= 1.0001f;
    std::printf("vitpe consumer: vitpe %s, model %s (%s), top-3 of %lld classes: %s\n",
                vitpe::version(), model.c_str(), classifier.config().name.c_str(),
                static_cast<long long>(classifier.config().classes), ok ? "ok" : "NOT ok");
    return ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("vitpe consumer: %s\n", e.what());
    return 1;
  }
}
