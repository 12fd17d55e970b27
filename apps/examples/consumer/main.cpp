// A vision application using the installed vitpe (find_package(vitpe), vitpe::vitpe): the
// README's example, classifying a cv::Mat in one call, plus checks that the installed headers,
// library and package version agree. Usage: consumer [CHECKPOINT_OR_PRESET [IMAGE]]; without
// arguments it classifies a gray square with the bundled checkpoint of the installed data folder.
#include <vitpe/vitpe.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <opencv2/imgcodecs.hpp>
#include <string>

int main(int argc, char** argv) {
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
