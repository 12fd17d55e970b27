// Frames of a video file or a camera for `vitpe classify --video`, read by OpenCV's videoio in a
// module of the command's own (libvitpe_video.so, apps/video/video_module.cpp) that the command
// loads on first use. The command itself does not link videoio: its backends (FFmpeg, GStreamer
// and what they bring, some hundred libraries) cost every other command 20-40 ms of start-up and
// 18 MiB, and a machine without them can still run everything but --video.
#pragma once

#include <memory>
#include <string>

namespace cv {
class Mat;
}

namespace vitpe::app {

class VideoSource {
 public:
  virtual ~VideoSource() = default;
  // The next frame (BGR, as OpenCV decodes it); false at the end or when none can be read.
  virtual bool read(cv::Mat& frame) = 0;
  // Frames per second as the source reports it; 0 when it does not.
  virtual double fps() const = 0;
};

// The module's entry points (extern "C", looked up by name). The loader refuses a module whose
// kVideoModuleAbi differs from its own: both come from one build, and a stale copy of the module
// beside another build's command would disagree on VideoSource's layout.
constexpr int kVideoModuleAbi = 1;
extern "C" {
using VideoModuleAbi = int (*)();
// camera >= 0: that camera (by its number); otherwise the file `path`. Null when it cannot be
// opened (and no exception leaves the module).
using VideoModuleOpen = VideoSource* (*)(const char* path, int camera);
}

// Opens `source`: a camera by its number when it is all digits, otherwise a file; null when it
// cannot be opened. Throws ExitError (code 1) when the module cannot be loaded, naming the paths
// tried and why.
std::unique_ptr<VideoSource> open_video(const std::string& source);

}  // namespace vitpe::app
