// vitpe's video module (libvitpe_video.so): OpenCV's videoio behind apps/video/video_source.h,
// loaded by the command on `classify --video` only.
#include <exception>
#include <memory>
#include <opencv2/core/mat.hpp>
#include <opencv2/core/utils/logger.hpp>
#include <opencv2/videoio.hpp>
#include <string>

#include "apps/video/video_source.h"

namespace {

class OpenCvVideo final : public vitpe::app::VideoSource {
 public:
  // A file is opened by the backends that read files only (FFmpeg, GStreamer, an image sequence,
  // OpenCV's MJPEG reader): OpenCV's "any" would also probe USB cameras through gPhoto2 and
  // libusb, slowly, for a path.
  // The backends that fail log their reasons on stderr (GStreamer's pipeline, the image
  // sequence's pattern); the command says itself what failed, so they are quiet while probing.
  bool open(const char* path, int camera) {
    const auto level = cv::utils::logging::setLogLevel(cv::utils::logging::LOG_LEVEL_SILENT);
    bool opened = false;
    try {
      if (camera >= 0) {
        opened = video_.open(camera) && video_.isOpened();
      } else {
        for (const int api :
             {cv::CAP_FFMPEG, cv::CAP_GSTREAMER, cv::CAP_IMAGES, cv::CAP_OPENCV_MJPEG}) {
          if (video_.open(path, api) && video_.isOpened()) {
            opened = true;
            break;
          }
        }
      }
    } catch (...) {
      cv::utils::logging::setLogLevel(level);
      throw;
    }
    cv::utils::logging::setLogLevel(level);
    return opened;
  }
  bool read(cv::Mat& frame) override {
    try {
      return video_.read(frame);
    } catch (const std::exception&) {
      return false;  // a frame OpenCV cannot decode ends the video, as a failed read does
    }
  }
  double fps() const override { return video_.get(cv::CAP_PROP_FPS); }

 private:
  cv::VideoCapture video_;
};

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int vitpe_video_module_abi() {
  return vitpe::app::kVideoModuleAbi;
}

__attribute__((visibility("default"))) vitpe::app::VideoSource* vitpe_video_open(const char* path,
                                                                                 int camera) {
  try {
    auto video = std::make_unique<OpenCvVideo>();
    if (video->open(path, camera)) return video.release();
  } catch (const std::exception&) {
  }
  return nullptr;
}

}  // extern "C"
