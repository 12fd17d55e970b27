// The command's side of apps/video/video_source.h: finds libvitpe_video.so and opens a source
// through it.
#include "apps/video/video_source.h"

#include <dlfcn.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "apps/command.h"
#include "ops/util.h"

namespace vitpe::app {
namespace {

constexpr const char* kModule = "libvitpe_video.so";

// The folder of the running command, empty when /proc/self/exe cannot be read.
std::string command_folder() {
  std::vector<char> path(4096);
  const ssize_t n = readlink("/proc/self/exe", path.data(), path.size() - 1);
  if (n <= 0) return "";
  const std::string exe(path.data(), static_cast<size_t>(n));
  const size_t slash = exe.rfind('/');
  return slash == std::string::npos ? "" : exe.substr(0, slash);
}

// The module's open function, loaded on first use and kept for the process (the sources it makes
// run its code). Beside the command first (a build tree), then where an install puts it
// (VITPE_VIDEO_MODULE_DIR, relative to the command's folder).
VideoModuleOpen load_module() {
  static VideoModuleOpen open = nullptr;
  if (open) return open;
  const std::string folder = command_folder();
  std::vector<std::string> tried;
  for (const std::string& dir : {folder, folder + "/" VITPE_VIDEO_MODULE_DIR}) {
    const std::string path = dir + "/" + kModule;
    if (access(path.c_str(), F_OK) != 0) {
      tried.push_back(path + " (no such file)");
      continue;
    }
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* why = dlerror();
      tried.push_back(path + " (" + (why ? why : "dlopen failed") + ")");
      continue;
    }
    const auto abi = reinterpret_cast<VideoModuleAbi>(dlsym(handle, "vitpe_video_module_abi"));
    const auto fn = reinterpret_cast<VideoModuleOpen>(dlsym(handle, "vitpe_video_open"));
    if (!abi || !fn || abi() != kVideoModuleAbi) {
      tried.push_back(path + " (not this build's video module: " +
                      (!abi || !fn ? std::string("its entry points are missing")
                                   : "interface " + std::to_string(abi()) + ", expected " +
                                         std::to_string(kVideoModuleAbi)) +
                      ")");
      dlclose(handle);
      continue;
    }
    open = fn;
    return open;
  }
  std::string list;
  for (const std::string& t : tried) list += "\n  " + t;
  throw ExitError{
      1, "--video: reading video needs vitpe's video module (" + std::string(kModule) +
             ", which reads through OpenCV's videoio), and it could not be loaded from:" + list +
             "\nOn Debian, OpenCV's videoio is the package libopencv-videoio406 "
             "(apt install libopencv-videoio406); images need none of this."};
}

}  // namespace

std::unique_ptr<VideoSource> open_video(const std::string& source) {
  if (is_digits(source) && source.size() > 6) {
    throw ExitError{2, "--video " + source +
                           ": a camera's number has at most 6 digits (a file of that name: "
                           "give it as ./" +
                           source + ")"};
  }
  const VideoModuleOpen open = load_module();
  const int camera = is_digits(source) ? std::stoi(source) : -1;
  return std::unique_ptr<VideoSource>(open(source.c_str(), camera));
}

}  // namespace vitpe::app
