// The files vitpe installs beside itself, in its data folder (share/vitpe of the prefix): the
// bundled Fashion-MNIST checkpoint (models/vit-fmnist.safetensors) and the class-name lists
// (labels/imagenet-1k.txt, labels/fashion-mnist.txt: one name per line, for `--labels`).
//
//   vitpe::Classifier classifier(vitpe::bundled_model());
#pragma once

#include <string>
#include <vector>

namespace vitpe {

// The folders searched for a data file, in order: $VITPE_DATA_DIR alone when it is set;
// otherwise share/vitpe beside the libvitpe in use (found from the library's own location, so a
// prefix moved or unpacked elsewhere still finds its files), the data folder of the build tree
// the library was built in, and share/vitpe of the prefix it was configured for.
std::vector<std::string> data_dirs();

// The path of RELATIVE (e.g. "labels/imagenet-1k.txt") in the first data folder that has it.
// Throws std::runtime_error naming the folders searched when none has it, or when RELATIVE is
// absolute or leaves the folder ("..").
std::string data_file(const std::string& relative);

// The bundled checkpoint: data_file("models/vit-fmnist.safetensors").
std::string bundled_model();

}  // namespace vitpe
